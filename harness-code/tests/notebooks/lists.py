# Lists and globals changed through functions: append through a helper,
# `global` inside a function called by another, an alias made in an
# earlier cell, a function reading a global that a later cell rebinds, and
# `eval` inside a helper.
# %%
xs = [1, 2]
ys = xs
count = 0
rate = 2

# %%
def grow(items, value):
    items.append(value)

def bump():
    global count
    count += 1

def bump_twice():
    bump()
    bump()

def price(x):
    return x * rate

def lookup(expression):
    return eval(expression)

# %%
grow(xs, 3)

# %%
ys.append(4)

# %%
bump_twice()

# %%
rate = 3

# %%
print(len(xs), sum(xs), count)

# %%
print(price(10))

# %%
print(lookup("rate + count"))

# %%
%time longest = max(xs)

# %%
print(longest)
