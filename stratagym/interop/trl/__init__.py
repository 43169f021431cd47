"""The env families for TRL's ``GRPOTrainer(environment_factory=...)``: :mod:`.tools` holds the shared
:class:`~stratagym.interop.trl.tools.TRLToolEnv`; :mod:`.search_qa`, :mod:`.webshop` and :mod:`.alfworld`
each give one family's class. ``trl`` itself is imported only by the trainer that uses them."""
