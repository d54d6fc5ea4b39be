"""A Hugging Face model with the table: the model built from its config (``model``), tokens/s eager and compiled
(``bench``, in ``rounds``, ``torchcompile``, with a profile in ``profile``), outputs checked against the model
without the table (``check``), the per-call cost of its linears (``percall``) and the summary (``report``)."""
