# Large values changed sparsely, and reads a class body makes: one element
# of an 8 MB array (by a numpy function writing in place, through a view),
# a column Series of a large frame and the frame changing each other, a
# class whose body and methods read globals, a class made by a function.
# %%
import numpy as np
import pandas as pd

# %%
a = np.zeros(1_000_000)
tail = a[500_000:]
untouched = np.ones(2_000_000)

# %%
np.add.at(a, [123457], 1.0)

# %%
def poke(array, value):
    array[12345] = value

# %%
poke(tail, 3.0)

# %%
big = pd.DataFrame({"x": np.zeros(100_000), "y": np.ones(100_000)})
col = big["x"]

# %%
col[54321] = 1.0

# %%
big.loc[23456, "x"] = 7.0

# %%
rate = 2
unit = "kg"

# %%
class Item:
    tag = unit
    def cost(self, n):
        return n * rate

# %%
def make():
    class Priced:
        value = rate * 10
    return Priced

# %%
rate = 3

# %%
print(a.sum(), big["x"].sum(), col.sum())

# %%
print(Item().cost(10), Item.tag, make().value, untouched[:2].sum())
