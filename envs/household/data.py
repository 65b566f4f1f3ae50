"""Static catalog of the built-in ``household`` environment (ALFWorld-like).

Pure data: room templates (which receptacle types a room has, how many, which open and
close), the object catalog (where each object type may lie and which task families it can
take part in), the six task families with their instruction templates, and the stations
used by the clean / heat / cool families.  ``envs/household/world.py`` turns these tables
into layouts, task panels and episode worlds.
"""

from __future__ import annotations

# The six ALFWorld task families, in the order panels cycle through them.
FAMILIES: tuple[str, ...] = (
    "pick_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place",
    "pick_heat_then_place",
    "pick_cool_then_place",
    "pick_two_obj_and_place",
)

# family -> (station receptacle type, verb, state flag bit); flags: 1 clean, 2 hot, 4 cold.
CLEAN, HOT, COLD = 1, 2, 4
STATIONS: dict[str, tuple[str, str, int]] = {
    "pick_clean_then_place": ("sinkbasin", "clean", CLEAN),
    "pick_heat_then_place": ("microwave", "heat", HOT),
    "pick_cool_then_place": ("fridge", "cool", COLD),
}
# verb -> (station type, flag set, flag cleared); heating undoes cooling and vice versa.
PROCESS_VERBS: dict[str, tuple[str, int, int]] = {
    "clean": ("sinkbasin", CLEAN, 0),
    "heat": ("microwave", HOT, COLD),
    "cool": ("fridge", COLD, HOT),
}
FLAG_WORDS: dict[int, str] = {CLEAN: "clean", HOT: "hot", COLD: "cool"}

# Instruction templates per family ({o}: object type, {r}: receptacle type).
INSTRUCTIONS: dict[str, tuple[str, ...]] = {
    "pick_and_place": ("put a {o} in {r}.", "put some {o} on {r}.", "find a {o} and put it in {r}."),
    "look_at_obj_in_light": ("look at {o} under the desklamp.", "examine the {o} with the desklamp."),
    "pick_clean_then_place": ("clean some {o} and put it in {r}.", "put a clean {o} in {r}."),
    "pick_heat_then_place": ("heat some {o} and put it in {r}.", "put a hot {o} in {r}."),
    "pick_cool_then_place": ("cool some {o} and put it in {r}.", "put a cool {o} in {r}."),
    "pick_two_obj_and_place": ("put two {o} in {r}.", "find two {o} and put them in {r}."),
}

LAMP = "desklamp 1"
LAMP_SURFACES: tuple[str, ...] = ("desk", "sidetable", "dresser")

# room -> list of (receptacle type, min count, max count, openable)
ROOMS: dict[str, tuple[tuple[str, int, int, bool], ...]] = {
    "kitchen": (
        ("cabinet", 4, 9, True), ("coffeemachine", 1, 1, False), ("countertop", 1, 3, False),
        ("diningtable", 0, 1, False), ("drawer", 2, 5, True), ("fridge", 1, 1, True),
        ("garbagecan", 1, 1, False), ("microwave", 1, 1, True), ("shelf", 0, 3, False),
        ("sinkbasin", 1, 1, False), ("stoveburner", 2, 4, False), ("toaster", 1, 1, False),
    ),
    "livingroom": (
        ("armchair", 0, 2, False), ("cabinet", 0, 3, True), ("coffeetable", 1, 2, False),
        ("diningtable", 0, 1, False), ("drawer", 0, 4, True), ("dresser", 0, 1, False),
        ("garbagecan", 1, 1, False), ("shelf", 1, 4, False), ("sidetable", 1, 2, False),
        ("sofa", 1, 1, False), ("tvstand", 1, 1, False),
    ),
    "bedroom": (
        ("armchair", 0, 1, False), ("bed", 1, 1, False), ("desk", 1, 2, False),
        ("drawer", 2, 6, True), ("dresser", 1, 1, False), ("garbagecan", 1, 1, False),
        ("laundryhamper", 0, 1, False), ("safe", 0, 1, True), ("shelf", 0, 4, False),
        ("sidetable", 1, 2, False),
    ),
    "bathroom": (
        ("bathtubbasin", 0, 1, False), ("cabinet", 2, 4, True), ("countertop", 1, 1, False),
        ("drawer", 0, 4, True), ("garbagecan", 1, 1, False), ("handtowelholder", 1, 1, False),
        ("shelf", 0, 2, False), ("sinkbasin", 1, 2, False), ("toilet", 1, 1, False),
        ("toiletpaperhanger", 1, 1, False), ("towelholder", 1, 1, False),
    ),
}
LAMP_ROOMS: tuple[str, ...] = ("bedroom", "livingroom")

_FOOD = ("countertop", "diningtable", "fridge", "microwave", "sinkbasin", "garbagecan")
_DISH = ("countertop", "cabinet", "shelf", "diningtable", "sinkbasin", "microwave", "fridge")
_UTENSIL = ("countertop", "drawer", "diningtable", "sinkbasin")
_SMALL = ("desk", "drawer", "sidetable", "shelf", "dresser", "coffeetable")

# object type -> (receptacle types it may lie in / be put in, families beyond pick/pick_two)
OBJECTS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "apple": (_FOOD, frozenset({"clean", "heat", "cool"})),
    "potato": (_FOOD, frozenset({"clean", "heat", "cool"})),
    "tomato": (_FOOD, frozenset({"clean", "heat", "cool"})),
    "egg": (_FOOD, frozenset({"clean", "heat", "cool"})),
    "lettuce": (("countertop", "diningtable", "fridge", "sinkbasin", "garbagecan"),
                frozenset({"clean", "cool"})),
    "bread": (("countertop", "diningtable", "fridge", "microwave", "shelf"),
              frozenset({"heat", "cool"})),
    "mug": (_DISH + ("coffeemachine", "desk"), frozenset({"clean", "heat", "cool", "look"})),
    "cup": (_DISH, frozenset({"clean", "heat", "cool"})),
    "plate": (_DISH, frozenset({"clean", "heat", "cool"})),
    "bowl": (_DISH + ("desk",), frozenset({"clean", "heat", "cool", "look"})),
    "pan": (("countertop", "stoveburner", "cabinet", "sinkbasin", "fridge", "diningtable"),
            frozenset({"clean", "cool"})),
    "pot": (("countertop", "stoveburner", "cabinet", "sinkbasin", "fridge", "diningtable"),
            frozenset({"clean", "cool"})),
    "kettle": (("countertop", "stoveburner", "cabinet", "sinkbasin", "shelf"), frozenset({"clean"})),
    "knife": (_UTENSIL, frozenset({"clean"})),
    "butterknife": (_UTENSIL, frozenset({"clean"})),
    "fork": (_UTENSIL, frozenset({"clean"})),
    "spoon": (_UTENSIL, frozenset({"clean"})),
    "ladle": (_UTENSIL, frozenset({"clean"})),
    "spatula": (_UTENSIL, frozenset({"clean"})),
    "dishsponge": (("countertop", "sinkbasin", "cabinet", "drawer"), frozenset({"clean"})),
    "saltshaker": (("countertop", "cabinet", "shelf", "drawer", "diningtable"), frozenset()),
    "peppershaker": (("countertop", "cabinet", "shelf", "drawer", "diningtable"), frozenset()),
    "winebottle": (("countertop", "fridge", "cabinet", "diningtable", "shelf"),
                   frozenset({"cool"})),
    "book": (("desk", "shelf", "sidetable", "bed", "sofa", "coffeetable", "dresser", "drawer"),
             frozenset({"look"})),
    "pen": (_SMALL, frozenset({"look"})),
    "pencil": (_SMALL, frozenset({"look"})),
    "cellphone": (("desk", "bed", "sidetable", "dresser", "drawer", "sofa", "coffeetable"),
                  frozenset({"look"})),
    "keychain": (_SMALL + ("sofa", "safe"), frozenset({"look"})),
    "creditcard": (_SMALL + ("armchair",), frozenset({"look"})),
    "cd": (("desk", "drawer", "shelf", "sidetable", "safe", "garbagecan"), frozenset({"look"})),
    "alarmclock": (("desk", "sidetable", "dresser", "shelf"), frozenset({"look"})),
    "watch": (("desk", "sidetable", "dresser", "drawer", "coffeetable", "safe"),
              frozenset({"look"})),
    "remotecontrol": (("sofa", "armchair", "coffeetable", "sidetable", "tvstand", "dresser"),
                      frozenset({"look"})),
    "statue": (("shelf", "coffeetable", "sidetable", "dresser", "tvstand", "desk"),
               frozenset({"look"})),
    "vase": (("shelf", "coffeetable", "sidetable", "dresser", "tvstand", "desk"),
             frozenset({"look"})),
    "pillow": (("sofa", "armchair", "bed"), frozenset({"look"})),
    "laptop": (("desk", "bed", "sofa", "coffeetable", "armchair", "dresser"), frozenset({"look"})),
    "newspaper": (("sofa", "armchair", "coffeetable", "sidetable", "dresser", "garbagecan"),
                  frozenset({"look"})),
    "box": (("sofa", "coffeetable", "shelf", "sidetable", "armchair", "dresser"),
            frozenset({"look"})),
    "cloth": (("laundryhamper", "countertop", "sinkbasin", "bathtubbasin", "cabinet", "drawer"),
              frozenset({"clean"})),
    "tissuebox": (("sidetable", "dresser", "coffeetable", "shelf", "toilet", "countertop"),
                  frozenset()),
    "candle": (("countertop", "toilet", "cabinet", "shelf", "bathtubbasin", "sidetable"),
               frozenset()),
    "soapbar": (("countertop", "sinkbasin", "bathtubbasin", "toilet", "cabinet", "garbagecan"),
                frozenset({"clean"})),
    "soapbottle": (("countertop", "cabinet", "shelf", "toilet", "garbagecan"), frozenset()),
    "spraybottle": (("toilet", "cabinet", "countertop", "garbagecan", "shelf"), frozenset()),
    "handtowel": (("handtowelholder", "countertop", "cabinet"), frozenset()),
    "towel": (("towelholder", "bathtubbasin", "countertop"), frozenset()),
    "toiletpaper": (("toiletpaperhanger", "toilet", "cabinet", "countertop", "garbagecan"),
                    frozenset()),
}

_KITCHEN = (
    "apple", "bowl", "bread", "butterknife", "cup", "dishsponge", "egg", "fork", "kettle",
    "knife", "ladle", "lettuce", "mug", "pan", "peppershaker", "plate", "pot", "potato",
    "saltshaker", "soapbottle", "spatula", "spoon", "spraybottle", "tomato", "winebottle",
)
_LIVING = (
    "book", "bowl", "box", "candle", "cellphone", "creditcard", "keychain", "laptop",
    "newspaper", "pen", "pencil", "pillow", "remotecontrol", "statue", "tissuebox", "vase",
    "watch",
)
_BED = (
    "alarmclock", "book", "bowl", "box", "cd", "cellphone", "cloth", "creditcard", "keychain",
    "laptop", "mug", "pen", "pencil", "pillow", "statue", "tissuebox", "vase", "watch",
)
_BATH = (
    "candle", "cloth", "dishsponge", "handtowel", "soapbar", "soapbottle", "spraybottle",
    "tissuebox", "toiletpaper", "towel",
)
# room -> object types found in it (start places and task objects)
ROOM_OBJECTS: dict[str, frozenset[str]] = {
    "kitchen": frozenset(_KITCHEN), "livingroom": frozenset(_LIVING),
    "bedroom": frozenset(_BED), "bathroom": frozenset(_BATH),
}

# Receptacle types an agent confuses with each other (used for plausible-wrong actions).
CONFUSABLE: dict[str, tuple[str, ...]] = {
    "sinkbasin": ("microwave", "fridge", "bathtubbasin"),
    "microwave": ("fridge", "sinkbasin", "toaster"),
    "fridge": ("microwave", "sinkbasin", "cabinet"),
    "countertop": ("diningtable", "shelf"),
    "diningtable": ("countertop", "coffeetable"),
    "cabinet": ("drawer", "shelf"),
    "drawer": ("cabinet", "dresser"),
    "desk": ("sidetable", "dresser"),
    "sidetable": ("desk", "coffeetable"),
    "dresser": ("drawer", "sidetable"),
    "sofa": ("armchair", "bed"),
    "armchair": ("sofa",),
    "bed": ("sofa",),
    "shelf": ("cabinet", "countertop"),
}


def family_verb(family: str) -> str:
    """The short family name used in catalog tags: pick, look, clean, heat, cool, pick_two."""
    return {
        "pick_and_place": "pick",
        "look_at_obj_in_light": "look",
        "pick_clean_then_place": "clean",
        "pick_heat_then_place": "heat",
        "pick_cool_then_place": "cool",
        "pick_two_obj_and_place": "pick_two",
    }[family]
