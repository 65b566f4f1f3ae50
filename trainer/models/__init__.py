"""The models: backbones and tokenizers (:mod:`~trainer.models.backbones`), the chat format
(:mod:`~trainer.models.chat`), the papers' backbones at their sizes with random weights
(:mod:`~trainer.models.paper_shapes`), images in the context (:mod:`~trainer.models.vision`),
mixed precision (:mod:`~trainer.models.precision`), the generation backends, transformers
and vLLM (:mod:`~trainer.models.backends`), and saved model folders
(:mod:`~trainer.models.folders`)."""
