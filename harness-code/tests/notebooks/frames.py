# Data frames changed in place: `df.loc[...] =`, a helper that scales the
# frame it is given, a second name for the same frame, a column through
# `inplace=True`, a Series sharing the frame's index.
# %%
import numpy as np
import pandas as pd

# %%
df = pd.DataFrame({"city": ["a", "b", "c", "d"], "sales": [10.0, 20.0, 30.0, 40.0]})
raw = df

# %%
def scale(frame, factor):
    frame["sales"] *= factor

# %%
scale(df, 2)

# %%
df.loc[df["sales"] > 50, "sales"] = 50.0

# %%
raw.loc[0, "city"] = "z"

# %%
df.sort_values("sales", inplace=True)

# %%
index = df.index
s = pd.Series(np.ones(len(df)), index=index)

# %%
total = df["sales"].sum()
print(total, list(df["city"]))

# %%
print(s.sum())
