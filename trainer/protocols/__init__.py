"""Measurement protocols on frozen actors: ETRO's regional alignment
(:mod:`~trainer.protocols.alignment`, Fig. 1) and post-error recovery
(:mod:`~trainer.protocols.continuations`, Table 6).  They return frames; the command line
draws them."""
