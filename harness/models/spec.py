"""Variant specs: which route feeds which role (DESIGN section 3, "Roles and routes").

A variant is data, not code. A spec (TOML) names the residual structure and, for each
routing *site* (``attn``, ``mlp``, ``out``), these tables:

* ``queries``: pseudo-query vectors ``w_*`` of shape ``[D]`` (zero-initialised), each
  trainable (a parameter) or frozen (a buffer);
* ``offsets`` (optional): learned offsets ``b_*`` of shape ``[D]`` (zero-initialised),
  added to a route's output (``param_matched``: Q, K and V read ``norm(r0 + b)``);
* ``routes``: route name -> list of pseudo-query names whose SUM is the route's query
  (``query_reparam`` uses ``["w_qk", "w_extra"]``), or a table
  ``{ queries = [...], offset = "b_..." }`` for a route with an offset;
* ``roles``: role name -> list of route names whose MEAN feeds that role (listing one
  route twice under two names, as ``dup_route_tied`` does, executes it twice);
* ``head_groups`` (attention site only, instead of ``roles``): an array of tables, one
  per group of heads in head order, each with its own ``q``, ``k``, ``v`` and an
  optional integer ``share`` (default 1): a group gets ``H * share / sum(shares)``
  contiguous heads (``dup_route``: heads ``0..H/2-1`` read r0, ``H/2..H-1`` read r1).

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

A spec with ``base = "VARIANT"`` adds to another variant instead of restating it
(:mod:`harness.models.compose`; ``rd_offset`` = ``rd_attnres`` plus ``param_matched``'s offset).

Built-in specs (parent, treatment, references) live in ``harness/models/specs/``;
control specs live in the top-level ``controls/`` folder. Extra folders can be added
with ``$HARNESS_SPEC_PATH`` (``os.pathsep``-separated).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field

from harness.common.terms import ROLES

RESIDUALS = ("prenorm", "full", "block")
SITE_ROLES = {"attn": ("q", "k", "v"), "mlp": ("mlp",), "out": ("out",)}
DEFAULT_QUERY = {"attn": "w_qk", "mlp": "w_mlp", "out": "w_out"}
DEFAULT_ROUTE = {"attn": "qk", "mlp": "mlp", "out": "out"}


@dataclass(frozen=True)
class HeadGroup:
    """Roles of one group of attention heads (``share``: relative number of heads).

    ``roles``: role name -> route names whose mean feeds that role for these heads.
    """

    share: int
    roles: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class SiteSpec:
    """Routing at one site: pseudo-queries, offsets, routes and the roles of each head group.

    Attributes:
        queries: pseudo-query name (``w_*``) -> trainable.
        routes: route name -> the pseudo-queries whose sum is its query.
        groups: head groups in head order; every site but a split attention site has one
            group, whose ``roles`` feed every head (and the MLP/output input).
        offsets: offset name (``b_*``) -> trainable.
        route_offsets: route name -> the offset added to that route's output.
    """

    queries: dict[str, bool]
    routes: dict[str, tuple[str, ...]]
    groups: tuple[HeadGroup, ...]
    offsets: dict[str, bool] = field(default_factory=dict)
    route_offsets: dict[str, str] = field(default_factory=dict)

    @classmethod
    def default(cls, site: str) -> SiteSpec:
        """The parent's single route at ``site`` (every role reads it)."""
        q, r = DEFAULT_QUERY[site], DEFAULT_ROUTE[site]
        return cls({q: True}, {r: (q,)}, (HeadGroup(1, {role: (r,) for role in SITE_ROLES[site]}),))

    def head_counts(self, n_heads: int) -> list[int]:
        """Heads of each group, in head order: ``n_heads * share / sum(shares)`` each.

        Raises:
            ValueError: the shares do not split ``n_heads`` into whole numbers.
        """
        shares = [g.share for g in self.groups]
        total = sum(shares)
        if any(n_heads * s % total for s in shares):
            raise ValueError(
                f"head groups with shares {shares} cannot split {n_heads} attention heads "
                f"evenly; use shares whose sum divides the number of heads"
            )
        return [n_heads * s // total for s in shares]

    def route_pairs(self) -> list[tuple[str, str]]:
        """Every unordered pair of routes, in declaration order (the degeneracy records)."""
        names = list(self.routes)
        return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]


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
        base: the variant a composed spec adds to (:mod:`harness.models.compose`), ``""`` else.
        text: the TOML text it was read from (``""`` when built from a mapping), which
            :func:`parse_spec_text` turns into this spec again (tables in file order).
    """

    name: str
    residual: str
    sites: dict[str, SiteSpec]
    role: str = "reference"
    description: str = ""
    source: str = ""
    text: str = field(default="", compare=False, repr=False)
    base: str = ""


def _fail(where: str, msg: str) -> ValueError:
    return ValueError(f"{where}: {msg}")


def _names(value, where: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"{key} must be a non-empty list of names, got {value!r}")
    return tuple(value)


def _declared(site: str, kind: str, prefix: str, table, where: str) -> dict[str, bool]:
    """``[site.queries]`` / ``[site.offsets]``: name -> trainable; names start with ``prefix``."""
    if not isinstance(table, dict):
        raise _fail(where, f"[{site}.{kind}] must be a table of name = {{}}, got {table!r}")
    out: dict[str, bool] = {}
    for name, opts in table.items():
        if not name.startswith(prefix):
            raise _fail(where, f"[{site}.{kind}] {name!r}: names start with {prefix!r}")
        opts = opts or {}
        if not isinstance(opts, dict):
            raise _fail(where, f"[{site}.{kind}] {name} = {opts!r}: use {{}} or {{ trainable = false }}")
        bad = set(opts) - {"trainable"}
        if bad:
            raise _fail(where, f"[{site}.{kind}.{name}] unknown key(s) {sorted(bad)}; allowed: ['trainable']")
        out[name] = bool(opts.get("trainable", True))
    return out


def _parse_route(
    site: str, rname: str, value, queries: dict, offsets: dict, where: str
) -> tuple[tuple[str, ...], str | None]:
    """A route: a list of query names, or ``{ queries = [...], offset = "b_..." }``."""
    key = f"[{site}.routes] {rname}"
    offset = None
    if isinstance(value, dict):
        bad = set(value) - {"queries", "offset"}
        if bad or "queries" not in value:
            raise _fail(
                where, f"{key}: a route table has keys 'queries' (required) and 'offset', got {sorted(value)}"
            )
        offset = value.get("offset")
        if offset is not None and offset not in offsets:
            raise _fail(
                where,
                f"{key} uses unknown offset {offset!r}; declared in [{site}.offsets]: {sorted(offsets)}",
            )
        value = value["queries"]
    qs = _names(value, where, key)
    for q in qs:
        if q not in queries:
            raise _fail(where, f"{key} uses unknown query {q!r}; declared: {sorted(queries)}")
    return qs, offset


def _parse_roles(site: str, table, routes: dict, where: str, key: str) -> dict[str, tuple[str, ...]]:
    expected = SITE_ROLES[site]
    if not isinstance(table, dict) or set(table) != set(expected):
        got = sorted(table) if isinstance(table, dict) else table
        raise _fail(where, f"{key} must define exactly {list(expected)}, got {got}")
    roles = {}
    for role in expected:
        rs = _names(table[role], where, f"{key} {role}")
        for r in rs:
            if r not in routes:
                raise _fail(where, f"{key} {role} uses unknown route {r!r}; declared: {sorted(routes)}")
        roles[role] = rs
    return roles


def _parse_groups(site: str, table: dict, routes: dict, where: str) -> tuple[HeadGroup, ...]:
    """``[site.roles]`` (one group) or, at the attention site, ``[[attn.head_groups]]``."""
    if ("roles" in table) == ("head_groups" in table):
        allowed = "'roles' or 'head_groups'" if site == "attn" else "'roles'"
        raise _fail(where, f"[{site}] needs exactly one of {allowed}")
    if "roles" in table:
        return (HeadGroup(1, _parse_roles(site, table["roles"], routes, where, f"[{site}.roles]")),)
    if site != "attn":
        raise _fail(where, f"[{site}] head_groups: only the attention site has heads")
    groups = table["head_groups"]
    if not isinstance(groups, list) or len(groups) < 2 or not all(isinstance(g, dict) for g in groups):
        raise _fail(
            where, f"[[{site}.head_groups]] must be at least two tables (one per head group), got {groups!r}"
        )
    out = []
    for i, g in enumerate(groups):
        key = f"[[{site}.head_groups]] #{i}"
        share = g.get("share", 1)
        if isinstance(share, bool) or not isinstance(share, int) or share < 1:
            raise _fail(where, f"{key} share={share!r}: a positive integer (relative number of heads)")
        roles = {k: v for k, v in g.items() if k != "share"}
        out.append(HeadGroup(share, _parse_roles(site, roles, routes, where, key)))
    return tuple(out)


def _parse_site(site: str, table: dict, where: str) -> SiteSpec:
    allowed = {"queries", "offsets", "routes", "roles", "head_groups"}
    unknown = set(table) - allowed
    if unknown:
        raise _fail(where, f"[{site}] unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    missing = {"queries", "routes"} - set(table)
    if missing:
        raise _fail(where, f"[{site}] missing table(s) {sorted(missing)}")
    queries = _declared(site, "queries", "w_", table["queries"], where)
    offsets = _declared(site, "offsets", "b_", table.get("offsets", {}), where)
    routes: dict[str, tuple[str, ...]] = {}
    route_offsets: dict[str, str] = {}
    for rname, value in table["routes"].items():
        routes[rname], offset = _parse_route(site, rname, value, queries, offsets, where)
        if offset is not None:
            route_offsets[rname] = offset
    groups = _parse_groups(site, table, routes, where)
    unused = set(queries) - {q for qs in routes.values() for q in qs}
    if unused:
        raise _fail(where, f"[{site}.queries] {sorted(unused)} declared but used by no route")
    unused = set(offsets) - set(route_offsets.values())
    if unused:
        raise _fail(where, f"[{site}.offsets] {sorted(unused)} declared but used by no route")
    used_routes = {r for g in groups for rs in g.roles.values() for r in rs}
    if set(routes) - used_routes:
        raise _fail(where, f"[{site}.routes] {sorted(set(routes) - used_routes)} feed no role")
    return SiteSpec(queries, routes, groups, offsets, route_offsets)


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
        name=str(data["name"]),
        residual=residual,
        sites=sites,
        role=role,
        description=str(data.get("description", "")),
        source=where,
    )


def parse_spec_text(text: str, *, where: str = "<spec>") -> VariantSpec:
    """:func:`parse_spec` of a spec's TOML text, keeping the text (:attr:`VariantSpec.text`).

    Raises:
        ValueError: not valid TOML, or as :func:`parse_spec`.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: not valid TOML: {exc}") from None
    return dataclasses.replace(parse_spec(data, where=where), text=text)
