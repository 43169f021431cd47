"""Reference agent programs (:mod:`stratagym.training.rollout.program`): plain ``openai``-client loops a user
could have written, packaged so recipes name them as ``env.id: program:stratagym.training.programs.<module>:<factory>``.

* :mod:`.searchqa` -- SearchQA played through tools by an ``openai`` SDK loop (the env as its tool server).
"""
