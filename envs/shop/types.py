"""The product-type table of the built-in ``shop`` catalog (data only).

Each :class:`ProductType` plays the role of one WebShop scraping query: its products share a
category path (WebShop's ``product_category``, levels joined by " › "), a product name whose
nouns feed the type reward, a pool of attributes (WebShop's ``attributes``, mined from
titles/bullet points there; here the closed vocabulary a product draws from) and option
dimensions (WebShop's ``customization_options``: size, color, flavor, ...).  Within one type
the option pools are disjoint, so an option value names its dimension unambiguously.
"""

from __future__ import annotations

from dataclasses import dataclass

CLOTHING_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
BED_SIZES = ("twin", "full", "queen", "king", "california king")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "11", "12")
COLORS = (
    "black", "white", "navy blue", "heather grey", "red", "dark brown", "beige",
    "olive green", "pink", "royal blue", "burgundy", "khaki",
)
HOME_COLORS = ("white", "light grey", "charcoal", "navy blue", "sage green", "ivory", "taupe", "blush pink")
GADGET_COLORS = ("black", "white", "silver", "midnight blue", "rose gold", "forest green")
PACKS = ("pack of 1", "pack of 2", "pack of 3", "pack of 6", "pack of 12", "pack of 24")
SCENTS = ("lavender", "coconut", "fresh linen", "citrus", "eucalyptus", "rose")
VOLUMES = ("8 fl oz", "12 fl oz", "16 fl oz", "32 fl oz")


@dataclass(frozen=True)
class ProductType:
    """One product type (a WebShop query).

    ``name`` is the product name used in titles and instructions; ``nouns`` are its nouns
    (WebShop runs spaCy's POS tagger over the name; here they are listed by hand);
    ``options`` maps each option dimension to its value pool; ``price`` is the (low, high)
    range prices are drawn from.
    """

    key: str
    name: str
    category: str
    nouns: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: tuple[float, float]


def _t(key, name, category, nouns, attributes, options, price) -> ProductType:
    return ProductType(key, name, category, tuple(nouns), tuple(attributes), tuple(options), price)


PRODUCT_TYPES: tuple[ProductType, ...] = (
    _t("mens_tshirt", "men's t-shirt", "clothing › men › shirts", ["t-shirt"],
       ["machine wash", "cotton", "short sleeve", "long sleeve", "crew neck", "v-neck",
        "slim fit", "moisture wicking", "relaxed fit", "tagless"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (8, 40)),
    _t("mens_polo", "men's polo shirt", "clothing › men › shirts", ["polo", "shirt"],
       ["machine wash", "short sleeve", "slim fit", "moisture wicking", "button closure",
        "pique cotton", "classic fit", "wrinkle free"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (15, 60)),
    _t("mens_dress_shirt", "men's dress shirt", "clothing › men › shirts", ["dress", "shirt"],
       ["long sleeve", "button closure", "wrinkle free", "slim fit", "regular fit",
        "non-iron", "spread collar", "machine wash"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (20, 80)),
    _t("womens_blouse", "women's blouse", "clothing › women › tops", ["blouse"],
       ["long sleeve", "short sleeve", "v-neck", "chiffon", "loose fit", "button closure",
        "machine wash", "hand wash"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (12, 50)),
    _t("womens_yoga_pants", "women's yoga pants", "clothing › women › activewear", ["yoga", "pants"],
       ["high waist", "tummy control", "moisture wicking", "four-way stretch", "squat proof",
        "side pockets", "machine wash", "butt lift"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (10, 45)),
    _t("mens_joggers", "men's jogger pants", "clothing › men › pants", ["jogger", "pants"],
       ["elastic waist", "drawstring", "side pockets", "moisture wicking", "slim fit",
        "machine wash", "cotton", "fleece lined"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (15, 55)),
    _t("womens_sundress", "women's sundress", "clothing › women › dresses", ["sundress"],
       ["sleeveless", "floral print", "v-neck", "side pockets", "a-line", "midi length",
        "machine wash", "loose fit"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (15, 60)),
    _t("mens_hoodie", "men's hoodie", "clothing › men › sweatshirts", ["hoodie"],
       ["fleece lined", "pullover", "full zip", "kangaroo pocket", "machine wash",
        "relaxed fit", "cotton", "drawstring"],
       [("size", CLOTHING_SIZES), ("color", COLORS)], (20, 70)),
    _t("mens_running_shoes", "men's running shoes", "clothing › men › shoes", ["running", "shoes"],
       ["lightweight", "breathable", "non slip", "rubber sole", "memory foam", "lace up",
        "arch support", "wide width"],
       [("size", SHOE_SIZES), ("color", COLORS)], (30, 120)),
    _t("womens_sandals", "women's sandals", "clothing › women › shoes", ["sandals"],
       ["open toe", "ankle strap", "non slip", "arch support", "rubber sole", "memory foam",
        "lightweight", "wide width"],
       [("size", SHOE_SIZES), ("color", COLORS)], (15, 60)),
    _t("womens_ankle_boots", "women's ankle boots", "clothing › women › shoes", ["ankle", "boots"],
       ["side zipper", "block heel", "faux leather", "waterproof", "rubber sole", "round toe",
        "wide width", "non slip"],
       [("size", SHOE_SIZES), ("color", COLORS)], (30, 110)),
    _t("shampoo", "shampoo", "beauty › hair care › shampoo", ["shampoo"],
       ["sulfate free", "paraben free", "for dry hair", "natural ingredients", "cruelty free",
        "color safe", "anti dandruff", "argan oil"],
       [("size", VOLUMES), ("scent", SCENTS)], (6, 35)),
    _t("face_moisturizer", "face moisturizer", "beauty › skin care › face", ["face", "moisturizer"],
       ["hyaluronic acid", "oil free", "for sensitive skin", "fragrance free", "spf 30",
        "cruelty free", "anti aging", "non comedogenic"],
       [("size", ("1.7 fl oz", "2.5 fl oz", "3.4 fl oz"))], (10, 60)),
    _t("lipstick", "lipstick", "beauty › makeup › lips", ["lipstick"],
       ["long lasting", "matte finish", "cruelty free", "paraben free", "waterproof",
        "moisturizing", "vegan", "smudge proof"],
       [("color", ("ruby red", "nude pink", "berry", "coral", "mauve", "plum", "brick red")),
        ("size", ("pack of 1", "pack of 2", "pack of 3"))], (5, 30)),
    _t("body_wash", "body wash", "beauty › bath › body wash", ["body", "wash"],
       ["sulfate free", "for sensitive skin", "natural ingredients", "moisturizing",
        "paraben free", "cruelty free", "tea tree oil", "hypoallergenic"],
       [("size", VOLUMES), ("scent", SCENTS)], (5, 30)),
    _t("hair_dryer", "hair dryer", "beauty › hair care › styling tools", ["hair", "dryer"],
       ["ionic", "lightweight", "diffuser attachment", "fast drying", "low noise",
        "foldable handle", "ceramic", "cool shot button"],
       [("color", GADGET_COLORS)], (20, 120)),
    _t("protein_bars", "protein bars", "grocery › snacks › bars", ["protein", "bars"],
       ["gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "plant based",
        "individually wrapped", "dairy free"],
       [("flavor", ("chocolate chip", "peanut butter", "cookie dough", "salted caramel",
                    "mixed berry", "vanilla almond")), ("size", PACKS)], (10, 45)),
    _t("potato_chips", "potato chips", "grocery › snacks › chips", ["potato", "chips"],
       ["gluten free", "kettle cooked", "non gmo", "individually wrapped", "low sodium",
        "vegan", "baked", "family size"],
       [("flavor", ("sea salt", "barbecue", "sour cream and onion", "salt and vinegar",
                    "jalapeno")), ("size", PACKS)], (4, 30)),
    _t("ground_coffee", "ground coffee", "grocery › beverages › coffee", ["coffee"],
       ["medium roast", "dark roast", "organic", "fair trade", "decaf", "arabica beans",
        "non gmo", "resealable bag"],
       [("flavor", ("original", "french vanilla", "hazelnut", "caramel", "mocha")),
        ("size", ("12 ounce", "24 ounce", "2 pound", "pack of 2"))], (8, 40)),
    _t("green_tea", "green tea", "grocery › beverages › tea", ["green", "tea"],
       ["organic", "decaf", "individually wrapped", "non gmo", "kosher", "sugar free",
        "loose leaf", "gluten free"],
       [("flavor", ("jasmine", "mint", "lemon", "ginger", "honey")), ("size", PACKS)], (5, 30)),
    _t("dark_chocolate", "dark chocolate", "grocery › snacks › candy", ["chocolate"],
       ["sugar free", "keto friendly", "organic", "dairy free", "fair trade", "gluten free",
        "vegan", "individually wrapped"],
       [("flavor", ("sea salt", "almond", "orange", "mint", "raspberry")), ("size", PACKS)], (5, 35)),
    _t("sheet_set", "bed sheet set", "home › bedding › sheets", ["sheet", "set"],
       ["deep pocket", "machine wash", "wrinkle free", "cooling", "microfiber",
        "egyptian cotton", "hypoallergenic", "breathable"],
       [("size", BED_SIZES), ("color", HOME_COLORS)],
       (20, 120)),
    _t("pillow_covers", "throw pillow covers", "home › decor › pillows", ["pillow", "covers"],
       ["hidden zipper", "machine wash", "velvet", "linen", "decorative", "double sided",
        "farmhouse", "boho"],
       [("size", ("16 x 16 inch", "18 x 18 inch", "20 x 20 inch", "26 x 26 inch")),
        ("color", HOME_COLORS)], (8, 40)),
    _t("towel_set", "bath towel set", "home › bath › towels", ["towel", "set"],
       ["quick dry", "highly absorbent", "machine wash", "cotton", "lint free",
        "hotel quality", "oeko-tex certified", "plush"],
       [("size", ("set of 2", "set of 4", "set of 6", "set of 8")), ("color", HOME_COLORS)],
       (15, 80)),
    _t("blackout_curtains", "blackout curtains", "home › decor › window treatments", ["curtains"],
       ["thermal insulated", "noise reducing", "grommet top", "machine wash",
        "room darkening", "energy efficient", "rod pocket", "light blocking"],
       [("size", ("52 x 63 inch", "52 x 84 inch", "52 x 95 inch", "52 x 108 inch")),
        ("color", HOME_COLORS)], (15, 70)),
    _t("office_chair", "office chair", "home › furniture › office", ["office", "chair"],
       ["lumbar support", "adjustable height", "swivel", "mesh back", "padded armrests",
        "easy assembly", "ergonomic", "high back"],
       [("color", ("black", "grey", "white", "blue", "pink"))], (60, 300)),
    _t("storage_ottoman", "storage ottoman", "home › furniture › living room", ["ottoman"],
       ["easy assembly", "faux leather", "foldable", "lift top", "storage space", "tufted",
        "solid wood legs", "linen fabric"],
       [("size", ("small", "medium", "large")), ("color", HOME_COLORS)], (30, 150)),
    _t("wireless_earbuds", "wireless earbuds", "electronics › audio › headphones", ["earbuds"],
       ["noise cancelling", "bluetooth 5.3", "water resistant", "long battery life",
        "charging case", "touch control", "hands free", "fast charging"],
       [("color", GADGET_COLORS)], (15, 150)),
    _t("phone_case", "phone case", "electronics › accessories › cases", ["phone", "case"],
       ["shockproof", "slim", "wireless charging compatible", "kickstand",
        "screen protector", "card holder", "drop protection", "anti scratch"],
       [("model", ("iphone 14", "iphone 15", "iphone 15 pro", "galaxy s23", "pixel 8")),
        ("color", GADGET_COLORS)], (8, 40)),
    _t("usb_c_charger", "usb c charger", "electronics › accessories › chargers", ["charger"],
       ["fast charging", "foldable plug", "dual port", "compact", "overheat protection",
        "gan technology", "travel ready", "universal"],
       [("size", ("20w", "30w", "45w", "65w")), ("color", ("black", "white"))], (10, 60)),
    _t("bluetooth_speaker", "bluetooth speaker", "electronics › audio › speakers", ["speaker"],
       ["waterproof", "portable", "long battery life", "hands free", "high fidelity",
        "deep bass", "wireless", "built-in microphone"],
       [("color", GADGET_COLORS)], (20, 150)),
    _t("memory_card", "memory card", "electronics › storage › memory cards", ["memory", "card"],
       ["high speed", "4k video", "waterproof", "with adapter", "class 10", "shockproof",
        "temperature proof", "a2 rated"],
       [("size", ("64gb", "128gb", "256gb", "512gb"))], (8, 80)),
)

BRANDS: dict[str, tuple[str, ...]] = {
    "clothing": ("Northwind", "Alder & Co", "Bluepeak", "Coastline", "Hearthwear", "Marlow", "Tidewell", "Urbanite"),
    "beauty": ("Lumiere", "Verdant", "Pure Petal", "Aurelia", "Mossbloom", "Clarity Lab", "Saltwater", "Halo"),
    "grocery": ("Harvest Lane", "Golden Acre", "Wildroot", "Maple Hollow", "Sunny Mill", "Brookfarm", "Kindred", "Oakleaf"),
    "home": ("Homestead", "Linenloft", "Cozyden", "Driftwood", "Nestwell", "Palisade", "Quietnest", "Ravenhill"),
    "electronics": ("Voltix", "Sonara", "Kestrel", "Nimbus", "Arcwave", "Zentro", "Polaris", "Quanta"),
}

DESCRIPTION_LINES = (
    "Designed for everyday use and built to last.",
    "A customer favorite with thousands of happy buyers.",
    "Backed by a 30-day satisfaction guarantee.",
    "Thoughtfully made with quality materials.",
    "Makes a great gift for friends and family.",
    "Easy to care for and ready to use out of the box.",
)

# Sizes that read "size X" in an instruction; other sizes ("pack of 6", "12 fl oz") read bare.
NAMED_SIZES = frozenset(CLOTHING_SIZES + SHOE_SIZES + BED_SIZES)

# How an option value reads inside an instruction, per dimension.
OPTION_PHRASES: dict[str, str] = {
    "size": "size {v}", "color": "in {v}", "scent": "with {v} scent", "flavor": "{v} flavor",
    "model": "for {v}",
}
