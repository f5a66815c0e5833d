# Files written by one cell and read by another: plain text and CSV
# through pandas.
# %%
import pandas as pd

# %%
with open("numbers.txt", "w") as handle:
    handle.write("1\n2\n3\n")

# %%
pd.DataFrame({"x": [1, 2, 3], "y": [2.0, 4.0, 6.0]}).to_csv("table.csv", index=False)

# %%
with open("numbers.txt") as handle:
    numbers = [int(line) for line in handle]

# %%
table = pd.read_csv("table.csv")

# %%
print(sum(numbers), table["y"].sum())
