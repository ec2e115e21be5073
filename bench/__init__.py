"""Benchmarks for mmcodec: realistic payloads and the codecs we compare against.

:mod:`mmcodec.payloads` (shipped, since the demo uses them too) builds seeded multimodal
payloads the way an engine's front end does; ``bench.baselines`` holds today's approaches
(pickle, ``torch.save``, a hand-written msgspec-hooks codec) as reference points. Pickle
appears here only, as a baseline.
"""
