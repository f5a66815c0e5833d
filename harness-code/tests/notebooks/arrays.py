# numpy arrays changed through views and in-place functions, and random
# generators advancing.
# %%
import numpy as np

# %%
a = np.zeros(8)
view = a[:4]
b = np.arange(10)

# %%
view[:] = 7

# %%
np.random.seed(0)
np.random.shuffle(b)

# %%
np.add.at(a, [0, 0, 1], 1)

# %%
noise = np.random.rand(3)

# %%
rng = np.random.default_rng(1)

# %%
first = rng.random()

# %%
second = rng.random()
print(round(second, 6))

# %%
print(a.sum(), b[:3].tolist(), noise.round(3).tolist())
