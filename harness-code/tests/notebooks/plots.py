# Plotting state (Agg): a figure made in one cell and drawn on in later
# ones through pyplot's current axes, settings changed with rcParams, and
# a figure saved to a file that a later cell reads.
# %%
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

# %%
fig, ax = plt.subplots()

# %%
plt.rcParams["lines.linewidth"] = 3.0

# %%
plt.plot([1, 2, 3])

# %%
ax.set_title("sales")

# %%
line, = plt.plot([3, 2, 1])
width = line.get_linewidth()

# %%
fig.savefig("plot.png")

# %%
with open("plot.png", "rb") as handle:
    size = len(handle.read())

# %%
print(len(ax.lines), ax.get_title(), width, size > 0)
