"""What the example trainers share: byte-level data (data.py), the dp x tp x pp layout of a
model with embed / blocks / head parts (layout.py), and the training loop with its flags,
logging and checkpoints (trainer.py). Each example adds its model and its tensor-parallel
splits."""
