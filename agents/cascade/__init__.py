"""The cascade: VAD → end-of-turn → STT → LLM → streaming TTS, all on the CPU."""
