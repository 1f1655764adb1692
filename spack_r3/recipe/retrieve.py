"""Retrieval: the existing recipe of a package, and k similar recipes as examples.

Similarity (SpackIt's retrieval step): same build system first, then overlap of
dependencies and of variant names (Jaccard), text similarity (token cosine between the
analysis and the recipe) as the tie-break.
"""

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import List, Optional


@dataclass
class Existing:
    name: str
    namespace: str
    path: str
    build_systems: List[str]
    versions: List[str]
    variants: List[str]
    dependencies: List[str]


@dataclass
class Example:
    name: str
    namespace: str
    path: str
    score: float
    build_system: float
    dependencies: float
    variants: float
    text_similarity: float
    text: str = ""

    def summary(self):
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.__dict__.items() if k != "text"}


def find_existing(index, name) -> Optional[Existing]:
    info = index.find(name)
    if info is None:
        return None
    text = info.text()
    versions = re.findall(r"version\(\s*[\"']([^\"']+)[\"']", text)
    return Existing(
        info.name,
        info.namespace,
        info.path,
        info.build_systems,
        versions,
        sorted(info.variants),
        sorted(info.dependencies),
    )


def _tokens(text):
    return Counter(t.lower() for t in re.findall(r"[A-Za-z][A-Za-z0-9]{2,}", text))


def _cosine(a, b):
    if not a or not b:
        return 0.0
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    na = math.sqrt(sum(v * v for v in a.values()))
    nb = math.sqrt(sum(v * v for v in b.values()))
    return dot / (na * nb) if na and nb else 0.0


def _jaccard(a, b):
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if (a or b) else 0.0


LANG_DEPS = {"c", "cxx", "fortran"}
FEATURES = {"c", "cxx", "fortran", "mpi", "openmp", "cuda", "rocm", "python"}


def tree_features(analysis):
    """What the tree uses, in the terms recipes show it: languages, MPI, OpenMP, CUDA, Python,
    and the proxy-app tag where its README calls it a proxy or mini app."""
    out = set(x for x in analysis.languages if x in FEATURES)
    names = {v.name for v in analysis.variants} | {d.spack or "" for d in analysis.dependencies}
    out |= names & FEATURES
    if re.search(r"\b(proxy|mini)[- ]?app", analysis.description, re.I) or re.search(
        r"(openmp|cuda|mpi)", " ".join(analysis.build.get("subdirs") or []), re.I
    ):
        out.add("proxy-app")
    return out


def recipe_features(info):
    out = (set(info.dependencies) | set(info.variants)) & FEATURES
    return out


def similar(index, analysis, k=3, exclude=()) -> List[Example]:
    """The k recipes most like what the analysis describes."""
    deps = {d.spack for d in analysis.spack_dependencies()}
    variants = {v.name for v in analysis.variants}
    feats = tree_features(analysis)
    query = _tokens(
        " ".join([analysis.name, analysis.description, analysis.build_system] + sorted(deps) + sorted(variants))
    )
    scored = []
    for name, info in index.recipes.items():
        if name == analysis.name or name in exclude:
            continue
        bs = 1.0 if analysis.build_system in info.build_systems else 0.0
        dj = _jaccard(deps, info.dependencies - LANG_DEPS) if deps else 0.0
        vj = _jaccard(variants, info.variants) if variants else 0.0
        fj = _jaccard(feats - {"proxy-app"}, recipe_features(info)) if feats else 0.0
        scored.append([2.0 * bs + dj + 0.5 * vj + fj, bs, dj, vj, name, info])
    scored.sort(key=lambda x: -x[0])
    # text similarity breaks ties among the structurally best candidates
    head = scored[: max(50, k * 10)]
    for row in head:
        text = row[5].text()
        row.append(_cosine(query, _tokens(text)))
        row.append(text)
        if "proxy-app" in feats and re.search(r"tags\s*=\s*\[[^\]]*proxy-app", text):
            row[0] += 0.5  # an HPC proxy app like this one
    head.sort(key=lambda r: (-(r[0] + 0.25 * r[6]), r[4]))
    out = []
    for score, bs, dj, vj, name, info, ts, text in head[:k]:
        out.append(Example(name, info.namespace, info.path, score + 0.25 * ts, bs, dj, vj, ts, text))
    return out
