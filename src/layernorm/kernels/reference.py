"""(Loads no Triton.) The readable references the Triton backwards differentiate under ``create_graph=True`` (second
order), registered by the modules that own them: "norm" by ``layernorm.functional``
(``normalize``), "lstm" / "gru" by ``layernorm.ops.sequence`` (the cells' reference loops);
so the kernels never import the library's layers above them."""

REFERENCE: dict = {}
