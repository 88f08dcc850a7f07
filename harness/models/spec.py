"""Variant specs: which route feeds which role (DESIGN section 3, "Roles and routes").

A variant is data, not code. A spec (TOML) names the residual structure and, for each
routing *site* (``attn``, ``mlp``, ``out``), three tables:

* ``queries``: pseudo-query vectors ``w`` of shape ``[D]`` (zero-initialised), each
  trainable (a parameter) or frozen (a buffer);
* ``routes``: route name -> list of pseudo-query names whose SUM is the route's query
  (``param_matched`` uses ``["w_qk", "w_extra"]``);
* ``roles``: role name -> list of route names whose MEAN feeds that role (``dup_route``
  uses ``["qk", "dup"]``; listing one route twice under two names, as ``dup_route_tied``
  does, executes it twice).

The attention site has the roles ``q``, ``k``, ``v``; the MLP site ``mlp``; the output
site ``out``. Omitted sites get the parent's single route (``w_mlp``, ``w_out``)::

    name = "rd_attnres"
    residual = "block"
    [attn.queries]
    w_qk = {}
    w_v = {}                     # fixed_v: w_v = { trainable = false }
    [attn.routes]
    qk = ["w_qk"]
    v = ["w_v"]
    [attn.roles]
    q = ["qk"]
    k = ["qk"]
    v = ["v"]

Built-in specs (parent, treatment, references) live in ``harness/models/specs/``;
control specs live in the top-level ``controls/`` folder. Extra folders can be added
with ``$HARNESS_SPEC_PATH`` (``os.pathsep``-separated).
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

RESIDUALS = ("prenorm", "full", "block")
SITE_ROLES = {"attn": ("q", "k", "v"), "mlp": ("mlp",), "out": ("out",)}
DEFAULT_QUERY = {"attn": "w_qk", "mlp": "w_mlp", "out": "w_out"}
DEFAULT_ROUTE = {"attn": "qk", "mlp": "mlp", "out": "out"}
ROLES = ("parent", "treatment", "control", "reference")


@dataclass(frozen=True)
class SiteSpec:
    """Routing at one site: pseudo-queries, routes (sums of queries), roles (means of routes)."""

    queries: dict[str, bool]  # name -> trainable
    routes: dict[str, tuple[str, ...]]
    roles: dict[str, tuple[str, ...]]

    @classmethod
    def default(cls, site: str) -> "SiteSpec":
        """The parent's single route at ``site`` (every role reads it)."""
        q, r = DEFAULT_QUERY[site], DEFAULT_ROUTE[site]
        return cls({q: True}, {r: (q,)}, {role: (r,) for role in SITE_ROLES[site]})


@dataclass(frozen=True)
class VariantSpec:
    """A model variant: residual structure plus one :class:`SiteSpec` per routing site.

    Attributes:
        name: variant name used by ``build_model`` and grids.
        residual: ``prenorm`` (standard residual), ``full`` (Full AttnRes: every sublayer
            output is a source) or ``block`` (Block AttnRes, arXiv 2603.15031).
        sites: ``attn``/``mlp``/``out`` -> SiteSpec (empty for ``prenorm``).
        role: the variant's usual role in a study (parent/treatment/control/reference).
        description: one line for tables and reports.
        source: file the spec was read from.
    """

    name: str
    residual: str
    sites: dict[str, SiteSpec]
    role: str = "reference"
    description: str = ""
    source: str = ""

    def qk_v_routes(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """Routes feeding K and V at the attention site, or None when there is no routing."""
        attn = self.sites.get("attn")
        return None if attn is None else (attn.roles["k"], attn.roles["v"])


def _fail(where: str, msg: str) -> ValueError:
    return ValueError(f"{where}: {msg}")


def _names(value, where: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"{key} must be a non-empty list of names, got {value!r}")
    return tuple(value)


def _parse_site(site: str, table: dict, where: str) -> SiteSpec:
    allowed = {"queries", "routes", "roles"}
    unknown = set(table) - allowed
    if unknown:
        raise _fail(where, f"[{site}] unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    missing = allowed - set(table)
    if missing:
        raise _fail(where, f"[{site}] missing table(s) {sorted(missing)}")
    queries: dict[str, bool] = {}
    for qname, opts in table["queries"].items():
        if not qname.startswith("w_"):
            raise _fail(where, f"[{site}.queries] {qname!r}: pseudo-query names start with 'w_'")
        opts = opts or {}
        bad = set(opts) - {"trainable"}
        if bad:
            raise _fail(where, f"[{site}.queries.{qname}] unknown key(s) {sorted(bad)}; allowed: ['trainable']")
        queries[qname] = bool(opts.get("trainable", True))
    routes = {}
    for rname, qs in table["routes"].items():
        qs = _names(qs, where, f"[{site}.routes] {rname}")
        for q in qs:
            if q not in queries:
                raise _fail(where, f"[{site}.routes] {rname} uses unknown query {q!r}; declared: {sorted(queries)}")
        routes[rname] = qs
    roles = {}
    expected = SITE_ROLES[site]
    if set(table["roles"]) != set(expected):
        raise _fail(where, f"[{site}.roles] must define exactly {list(expected)}, got {sorted(table['roles'])}")
    for role in expected:
        rs = _names(table["roles"][role], where, f"[{site}.roles] {role}")
        for r in rs:
            if r not in routes:
                raise _fail(where, f"[{site}.roles] {role} uses unknown route {r!r}; declared: {sorted(routes)}")
        roles[role] = rs
    used = {q for qs in routes.values() for q in qs}
    unused = set(queries) - used
    if unused:
        raise _fail(where, f"[{site}.queries] {sorted(unused)} declared but used by no route")
    used_routes = {r for rs in roles.values() for r in rs}
    if set(routes) - used_routes:
        raise _fail(where, f"[{site}.routes] {sorted(set(routes) - used_routes)} feed no role")
    return SiteSpec(queries, routes, roles)


def parse_spec(data: dict, *, where: str = "<spec>") -> VariantSpec:
    """Validate a spec mapping (a parsed TOML file) and return a :class:`VariantSpec`.

    Raises:
        ValueError: unknown or missing keys, unknown residual, roles or routes that
            reference undeclared names; the message names ``where`` and the key.
    """
    allowed = {"name", "residual", "role", "description", "attn", "mlp", "out"}
    unknown = set(data) - allowed
    if unknown:
        raise _fail(where, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    for key in ("name", "residual"):
        if key not in data:
            raise _fail(where, f"missing key {key!r}")
    residual = data["residual"]
    if residual not in RESIDUALS:
        raise _fail(where, f"residual={residual!r}; allowed: {list(RESIDUALS)}")
    role = data.get("role", "reference")
    if role not in ROLES:
        raise _fail(where, f"role={role!r}; allowed: {list(ROLES)}")
    sites: dict[str, SiteSpec] = {}
    if residual == "prenorm":
        extra = set(data) & set(SITE_ROLES)
        if extra:
            raise _fail(where, f"residual='prenorm' has no routing sites, but defines {sorted(extra)}")
    else:
        for site in SITE_ROLES:
            sites[site] = _parse_site(site, data[site], where) if site in data else SiteSpec.default(site)
    return VariantSpec(
        name=str(data["name"]), residual=residual, sites=sites, role=role,
        description=str(data.get("description", "")), source=where,
    )


def load_spec_file(path: str | os.PathLike) -> VariantSpec:
    """Read and validate one spec TOML file (errors name the file)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    spec = parse_spec(data, where=str(path))
    if spec.name != path.stem:
        raise ValueError(f"{path}: name={spec.name!r} must equal the file name {path.stem!r}")
    return spec


def spec_dirs() -> list[Path]:
    """Folders searched for specs: built-ins, the ``controls`` package folder, ``$HARNESS_SPEC_PATH``.

    The ``controls`` folder is located without importing it: specs are data, and the
    dependency runs controls -> harness.models, never the reverse.
    """
    dirs = [Path(__file__).with_name("specs")]
    found = importlib.util.find_spec("controls")
    if found is not None and found.submodule_search_locations:
        dirs.append(Path(list(found.submodule_search_locations)[0]))
    for extra in filter(None, os.environ.get("HARNESS_SPEC_PATH", "").split(os.pathsep)):
        dirs.append(Path(extra))
    return dirs


def load_specs() -> dict[str, VariantSpec]:
    """All variant specs by name.

    Raises:
        ValueError: two files define the same variant name.
    """
    specs: dict[str, VariantSpec] = {}
    for folder in spec_dirs():
        for path in sorted(folder.glob("*.toml")):
            spec = load_spec_file(path)
            if spec.name in specs:
                raise ValueError(f"variant {spec.name!r} defined twice: {specs[spec.name].source} and {path}")
            specs[spec.name] = spec
    return specs
