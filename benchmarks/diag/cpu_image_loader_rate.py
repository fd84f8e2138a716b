"""The CPU image loader's pace in one process (Pillow, one torch thread): 400 generated
500x375 JPEGs, 224² random resized crop + flip, float32 normalised CHW, batch 32, three epochs
timed after the first batch. Prints images/s. Session 25 ran it on two source trees,
alternated (``benchmarks/results/cpu/images/session25_finalize_ab.txt``).
"""
import time

import torch

from vidloader import ImageLoader
from vidloader.images import ImageFolder, ImageProcess
from vidloader.images._synthetic import write_image_folder

torch.set_num_threads(1)
root = write_image_folder("/tmp/cpu-jpeg", num_classes=4, per_class=100)
ds = ImageFolder(root, progress=False, num_workers=0)
proc = ImageProcess(size=(224, 224), crop="random_resized", random_flip=True, dtype="float32",
                    normalized=True, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), layout="chw")
loader = ImageLoader(ds, batch_size=32, processing=proc, num_workers=0)
next(iter(loader))  # start-up outside the timing
t, n = time.perf_counter(), 0
for _epoch in range(3):
    for b in loader:
        n += len(b["images"])
print(f"{n / (time.perf_counter() - t):.1f}")
