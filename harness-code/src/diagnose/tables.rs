//! Lookup tables and string distance for the cheap suggestion rules.

/// Conventional import of a name that models use without importing it:
/// module aliases (`pd`, `np`), stdlib modules, and members usually
/// imported with `from` (`Counter`, `Path`).
const KNOWN_IMPORTS: &[(&str, &str)] = &[
    // Common aliases of third-party packages.
    ("pd", "import pandas as pd"),
    ("np", "import numpy as np"),
    ("plt", "import matplotlib.pyplot as plt"),
    ("mpl", "import matplotlib as mpl"),
    ("sns", "import seaborn as sns"),
    ("tf", "import tensorflow as tf"),
    ("torch", "import torch"),
    ("nn", "import torch.nn as nn"),
    ("F", "import torch.nn.functional as F"),
    ("sp", "import scipy as sp"),
    ("stats", "from scipy import stats"),
    ("sm", "import statsmodels.api as sm"),
    ("px", "import plotly.express as px"),
    ("go", "import plotly.graph_objects as go"),
    ("nx", "import networkx as nx"),
    ("pl", "import polars as pl"),
    ("requests", "import requests"),
    ("yaml", "import yaml"),
    ("tqdm", "from tqdm import tqdm"),
    // Standard library modules.
    ("abc", "import abc"),
    ("argparse", "import argparse"),
    ("array", "import array"),
    ("ast", "import ast"),
    ("asyncio", "import asyncio"),
    ("base64", "import base64"),
    ("bisect", "import bisect"),
    ("calendar", "import calendar"),
    ("collections", "import collections"),
    ("contextlib", "import contextlib"),
    ("copy", "import copy"),
    ("csv", "import csv"),
    ("dataclasses", "import dataclasses"),
    ("decimal", "import decimal"),
    ("difflib", "import difflib"),
    ("enum", "import enum"),
    ("fractions", "import fractions"),
    ("functools", "import functools"),
    ("glob", "import glob"),
    ("gzip", "import gzip"),
    ("hashlib", "import hashlib"),
    ("heapq", "import heapq"),
    ("html", "import html"),
    ("inspect", "import inspect"),
    ("io", "import io"),
    ("itertools", "import itertools"),
    ("json", "import json"),
    ("logging", "import logging"),
    ("math", "import math"),
    ("operator", "import operator"),
    ("os", "import os"),
    ("pathlib", "import pathlib"),
    ("pickle", "import pickle"),
    ("platform", "import platform"),
    ("random", "import random"),
    ("re", "import re"),
    ("shutil", "import shutil"),
    ("sqlite3", "import sqlite3"),
    ("statistics", "import statistics"),
    ("string", "import string"),
    ("struct", "import struct"),
    ("subprocess", "import subprocess"),
    ("sys", "import sys"),
    ("tempfile", "import tempfile"),
    ("textwrap", "import textwrap"),
    ("threading", "import threading"),
    ("time", "import time"),
    ("timeit", "import timeit"),
    ("typing", "import typing"),
    ("unicodedata", "import unicodedata"),
    ("urllib", "import urllib"),
    ("uuid", "import uuid"),
    ("warnings", "import warnings"),
    ("zipfile", "import zipfile"),
    ("zlib", "import zlib"),
    // Members usually imported by name.
    ("Counter", "from collections import Counter"),
    ("defaultdict", "from collections import defaultdict"),
    ("OrderedDict", "from collections import OrderedDict"),
    ("deque", "from collections import deque"),
    ("namedtuple", "from collections import namedtuple"),
    ("Path", "from pathlib import Path"),
    ("dataclass", "from dataclasses import dataclass"),
    ("field", "from dataclasses import field"),
    ("Decimal", "from decimal import Decimal"),
    ("Fraction", "from fractions import Fraction"),
    ("reduce", "from functools import reduce"),
    ("partial", "from functools import partial"),
    ("lru_cache", "from functools import lru_cache"),
    ("wraps", "from functools import wraps"),
    ("chain", "from itertools import chain"),
    ("combinations", "from itertools import combinations"),
    ("permutations", "from itertools import permutations"),
    ("product", "from itertools import product"),
    ("groupby", "from itertools import groupby"),
    ("islice", "from itertools import islice"),
    ("timedelta", "from datetime import timedelta"),
    ("timezone", "from datetime import timezone"),
    ("StringIO", "from io import StringIO"),
    ("BytesIO", "from io import BytesIO"),
    ("Enum", "from enum import Enum"),
    ("Any", "from typing import Any"),
    ("Optional", "from typing import Optional"),
    ("Union", "from typing import Union"),
    ("List", "from typing import List"),
    ("Dict", "from typing import Dict"),
    ("Tuple", "from typing import Tuple"),
    ("Iterable", "from typing import Iterable"),
    ("Callable", "from typing import Callable"),
    ("sqrt", "from math import sqrt"),
];

/// Attributes of `datetime.datetime` that code calls on the class; a cell
/// that uses `datetime.now()` wants `from datetime import datetime`.
const DATETIME_CLASS_ATTRIBUTES: &[&str] = &[
    "combine",
    "fromisoformat",
    "fromtimestamp",
    "now",
    "strptime",
    "today",
    "utcfromtimestamp",
    "utcnow",
];

/// The import that binds `name`, if `name` is a well-known module, alias or
/// member. `attributes` are the attributes the cell reads on `name`; they
/// decide between `import datetime` and `from datetime import datetime`
/// (and the same for `pprint`).
pub(crate) fn known_import(name: &str, attributes: &[&str], called: bool) -> Option<String> {
    match name {
        "datetime" => {
            let class = attributes
                .iter()
                .any(|a| DATETIME_CLASS_ATTRIBUTES.contains(a))
                || (called && attributes.is_empty());
            Some(if class {
                "from datetime import datetime".to_owned()
            } else {
                "import datetime".to_owned()
            })
        }
        "pprint" => Some(if called {
            "from pprint import pprint".to_owned()
        } else {
            "import pprint".to_owned()
        }),
        _ => KNOWN_IMPORTS
            .iter()
            .find(|(alias, _)| *alias == name)
            .map(|(_, statement)| (*statement).to_owned()),
    }
}

/// Top-level modules a model may misspell in an import: the stdlib modules
/// above and well-known third-party packages.
const KNOWN_MODULES: &[&str] = &[
    "bs4",
    "cv2",
    "datetime",
    "matplotlib",
    "networkx",
    "nltk",
    "numpy",
    "openpyxl",
    "pandas",
    "PIL",
    "plotly",
    "polars",
    "pprint",
    "pyarrow",
    "requests",
    "scipy",
    "seaborn",
    "sklearn",
    "statsmodels",
    "sympy",
    "tensorflow",
    "torch",
    "tqdm",
    "transformers",
    "yaml",
];

/// Known top-level module names: [`KNOWN_MODULES`] and the stdlib modules
/// of [`KNOWN_IMPORTS`].
pub(crate) fn known_modules() -> impl Iterator<Item = &'static str> {
    KNOWN_MODULES.iter().copied().chain(
        KNOWN_IMPORTS
            .iter()
            .filter_map(|(alias, statement)| {
                statement
                    .strip_prefix("import ")
                    .filter(|module| module == alias)
            })
            .map(|module| module.split('.').next().unwrap_or(module)),
    )
}

/// The package to install for an importable module whose distribution has
/// another name, or the same name for other well-known third-party modules.
pub(crate) fn package_for_module(module: &str) -> Option<&'static str> {
    const PACKAGES: &[(&str, &str)] = &[
        ("bs4", "beautifulsoup4"),
        ("cv2", "opencv-python"),
        ("PIL", "Pillow"),
        ("sklearn", "scikit-learn"),
        ("yaml", "PyYAML"),
        ("dateutil", "python-dateutil"),
        ("dotenv", "python-dotenv"),
        ("docx", "python-docx"),
        ("matplotlib", "matplotlib"),
        ("networkx", "networkx"),
        ("nltk", "nltk"),
        ("numpy", "numpy"),
        ("openpyxl", "openpyxl"),
        ("pandas", "pandas"),
        ("plotly", "plotly"),
        ("polars", "polars"),
        ("pyarrow", "pyarrow"),
        ("requests", "requests"),
        ("scipy", "scipy"),
        ("seaborn", "seaborn"),
        ("statsmodels", "statsmodels"),
        ("sympy", "sympy"),
        ("tensorflow", "tensorflow"),
        ("torch", "torch"),
        ("tqdm", "tqdm"),
        ("transformers", "transformers"),
    ];
    let top = module.split('.').next().unwrap_or(module);
    PACKAGES
        .iter()
        .find(|(m, _)| *m == top)
        .map(|(_, package)| *package)
}

/// Builtins worth suggesting for a misspelled name.
pub(crate) const COMMON_BUILTINS: &[&str] = &[
    "abs",
    "all",
    "any",
    "bool",
    "dict",
    "enumerate",
    "filter",
    "float",
    "format",
    "getattr",
    "hasattr",
    "input",
    "int",
    "isinstance",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "open",
    "print",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "sorted",
    "str",
    "sum",
    "tuple",
    "type",
    "zip",
    "None",
    "True",
    "False",
];

/// Attributes of common value types, for misspelled attribute names.
pub(crate) fn known_attributes(type_name: &str) -> &'static [&'static str] {
    match type_name {
        "str" => &[
            "capitalize",
            "casefold",
            "center",
            "count",
            "encode",
            "endswith",
            "find",
            "format",
            "index",
            "isalnum",
            "isalpha",
            "isdigit",
            "islower",
            "isnumeric",
            "isspace",
            "isupper",
            "join",
            "ljust",
            "lower",
            "lstrip",
            "partition",
            "removeprefix",
            "removesuffix",
            "replace",
            "rfind",
            "rjust",
            "rsplit",
            "rstrip",
            "split",
            "splitlines",
            "startswith",
            "strip",
            "title",
            "upper",
            "zfill",
        ],
        "list" => &[
            "append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove",
            "reverse", "sort",
        ],
        "dict" => &[
            "clear",
            "copy",
            "fromkeys",
            "get",
            "items",
            "keys",
            "pop",
            "popitem",
            "setdefault",
            "update",
            "values",
        ],
        "set" => &[
            "add",
            "clear",
            "copy",
            "difference",
            "discard",
            "intersection",
            "issubset",
            "issuperset",
            "pop",
            "remove",
            "symmetric_difference",
            "union",
            "update",
        ],
        "tuple" => &["count", "index"],
        "DataFrame" => &[
            "agg",
            "apply",
            "assign",
            "astype",
            "columns",
            "copy",
            "describe",
            "drop",
            "drop_duplicates",
            "dropna",
            "dtypes",
            "fillna",
            "filter",
            "groupby",
            "head",
            "iloc",
            "index",
            "info",
            "isna",
            "join",
            "loc",
            "mean",
            "melt",
            "merge",
            "pivot",
            "pivot_table",
            "plot",
            "query",
            "rename",
            "reset_index",
            "sample",
            "select_dtypes",
            "set_index",
            "shape",
            "sort_index",
            "sort_values",
            "sum",
            "tail",
            "to_csv",
            "to_dict",
            "to_json",
            "values",
        ],
        "Series" => &[
            "apply",
            "astype",
            "copy",
            "count",
            "describe",
            "dropna",
            "dt",
            "fillna",
            "head",
            "iloc",
            "index",
            "isin",
            "isna",
            "loc",
            "map",
            "max",
            "mean",
            "median",
            "min",
            "name",
            "nunique",
            "plot",
            "replace",
            "sort_values",
            "std",
            "str",
            "sum",
            "tolist",
            "unique",
            "value_counts",
            "values",
        ],
        "ndarray" => &[
            "T",
            "argmax",
            "argmin",
            "astype",
            "copy",
            "dtype",
            "flatten",
            "max",
            "mean",
            "min",
            "ndim",
            "reshape",
            "shape",
            "size",
            "std",
            "sum",
            "tolist",
            "transpose",
        ],
        _ => &[],
    }
}

/// Optimal-string-alignment distance (Levenshtein plus adjacent
/// transpositions), counting characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut table = vec![0_usize; (a.len() + 1) * width];
    for (i, row) in table.chunks_mut(width).enumerate() {
        row[0] = i;
    }
    for (j, cell) in table.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (table[(i - 1) * width + j] + 1)
                .min(table[i * width + j - 1] + 1)
                .min(table[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(table[(i - 2) * width + j - 2] + 1);
            }
            table[i * width + j] = best;
        }
    }
    table[a.len() * width + b.len()]
}

/// How close `candidate` is to `wanted` if it is close enough to be a
/// likely misspelling: lower is closer. A case-only difference counts 0;
/// otherwise up to one edit for names of 3 or 4 characters, two up to 8
/// and three beyond; shorter names match only on case.
pub(crate) fn closeness(wanted: &str, candidate: &str) -> Option<usize> {
    if wanted == candidate {
        return None;
    }
    if wanted.eq_ignore_ascii_case(candidate) {
        return Some(0);
    }
    let length = wanted.chars().count().max(candidate.chars().count());
    let limit = match length {
        0..=2 => return None,
        3..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    let distance = edit_distance(&wanted.to_lowercase(), &candidate.to_lowercase());
    (distance <= limit && distance < wanted.chars().count()).then_some(distance)
}
