"""Loading specs: YAML files, one spec mapping, command-line references and the predefined library.

Every error is a one-line SpecError naming the file, the field path and the problem.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from greval.errors import DataError, SpecError
from greval.paths import metric_specs_dir
from greval.spec.kinds import all_kinds, kind_model
from greval.spec.model import (
    ITEM_FIELDS,
    BaseSpec,
    CategoricalScale,
    EachTarget,
    Example,
    InputSpec,
    JudgeDefaults,
    Label,
    OutputSpec,
    Range,
    Spec,
    ValueScale,
)
from greval.spec.order import Cycle, field_at, order_specs, topological
from greval.spec.verdict import verdict_models
from greval.spec.yaml_reader import RefusedYAML, read_yaml, yaml_mark


def _loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("ValueScale", "CategoricalScale", "value", "categorical") and out.endswith("scale"):
            continue  # discriminated-union tags add noise, not information
        elif (
            part in ("function-after[_consistent()]", "function-after[_cover()]", "function-after[_unique()]")
            or part.startswith(("function-", "json-or-python", "union[", "tagged-union["))
            or part
            in (
                "list[str]",
                "dict[str,InputSpec]",
                "EachTarget",
                "literal['record']",
            )
        ):
            continue
        else:
            out += ("." if out else "") + part
    return out


def _fields_of(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _message(err: Any, raw: Any) -> str:
    kind = err["type"]
    msg = str(err["msg"])
    if kind == "extra_forbidden":
        name = str(err["loc"][-1])
        parent = _parent_model(err["loc"])
        hint = difflib.get_close_matches(name, _fields_of(parent), n=1) if parent else []
        return f"unknown field '{name}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_invalid":
        return "scale.kind must be 'value' or 'categorical'"
    if kind == "union_tag_not_found":
        return "scale needs kind: value or kind: categorical"
    if kind == "literal_error" and list(err["loc"])[:1] == ["target"]:
        return "target must be 'record' or {each: chunks|triples|turns}"
    if kind == "string_pattern_mismatch":
        return "must be an identifier: letters, digits and _, not starting with a digit"
    if kind == "too_short":
        n = err.get("ctx", {}).get("min_length", 1)
        return f"needs at least {n} item{'s' if n != 1 else ''}"
    return msg.removeprefix("Value error, ")


def _parent_model(loc: Sequence[Any]) -> type[BaseModel] | None:
    path = [p for p in loc[:-1] if isinstance(p, str)]
    model: type[BaseModel] = Spec
    table: dict[str, type[BaseModel]] = {
        "scale": ValueScale,
        "target": EachTarget,
        "judge": JudgeDefaults,
        "ranges": Range,
        "labels": Label,
        "examples": Example,
    }
    for p in path:
        if p in table:
            model = table[p]
        if p == "categorical":
            model = CategoricalScale
        if p == "outputs":
            model = OutputSpec
        if p == "inputs":
            model = InputSpec
    return model


def parse_spec(data: Any, source: str = "<spec>", where: str = "") -> BaseSpec:
    """Validate one spec mapping; raise SpecError naming the source, the field path and the problem."""
    if not isinstance(data, dict):
        raise SpecError(source, where, f"a spec must be a mapping, got {type(data).__name__}")
    kind = data.get("kind", "judge")
    model = kind_model(str(kind))
    if model is None:
        path = f"{where}.kind" if where else "kind"
        raise SpecError(source, path, f"unknown kind {kind!r}; use one of: {', '.join(all_kinds())}")
    try:
        spec = model.model_validate(data, context={"spec_source": source})
    except ValidationError as exc:
        errors = exc.errors()
        # An unknown key usually explains a "missing" one beside it (a typo): report it first.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        path = _loc(err["loc"])
        text = _message(err, data)
        at = re.match(r"^@([\w.\[\]]+): (.*)$", text)
        if at:  # a cross-field check that knows which field is at fault
            path = ".".join(p for p in (path, at.group(1)) if p)
            text = at.group(2)
        prefix = f"{where}." if where and path else where
        raise SpecError(source, prefix + path, text) from None
    except (TypeError, KeyError, AttributeError) as exc:
        # A validator that did not expect this type (a list where a name belongs …): still the file's fault.
        raise SpecError(source, where, f"invalid {kind} spec: {type(exc).__name__}: {exc}") from None
    try:
        spec.hash  # noqa: B018 - the hash is the spec's identity in the store: it must be computable
    except ValueError as exc:  # bytes that are not text, a lone surrogate …
        raise SpecError(source, where, f"cannot be stored as JSON text: {exc}") from None
    return spec


def _check_examples(spec: Spec, source: str, where: str) -> None:
    """Few-shot examples must be answers the judge could give, on inputs it can render.

    Checked while loading a file, where the file is known; the judge checks again when built, but only
    knows the spec's name.
    """
    if not spec.examples:
        return
    answer, _ = verdict_models(spec)
    for i, ex in enumerate(spec.examples):
        here = field_at(where, f"examples[{i}]")
        try:
            answer.model_validate(ex.output)
        except ValidationError as exc:
            err = exc.errors()[0]
            if err["type"] == "extra_forbidden":
                text = f"unknown field '{err['loc'][-1]}'"
            elif err["type"] == "missing":
                text = "required field is missing"
            else:
                text = str(err["msg"]).removeprefix("Value error, ")
            inner = _loc(err["loc"])  # in the message, as the judge reports it: the path stays the output's
            raise SpecError(source, f"{here}.output", f"{inner}: {text}" if inner else text) from None
        for field in ITEM_FIELDS:
            items = ex.inputs.get(field)
            if items is None or (field != spec.each and not isinstance(items, list)):
                continue
            if not isinstance(items, list):
                raise SpecError(source, f"{here}.inputs.{field}", f"the judged {field} must be a list of objects")
            keys = ("id", "subject", "predicate", "object") if field == "triples" else ("id",)
            for j, item in enumerate(items):
                if not isinstance(item, dict) or any(k not in item for k in keys):
                    need = ", ".join(keys) if field == "triples" else "id, text"
                    raise SpecError(source, f"{here}.inputs.{field}[{j}]", f"each item must be an object with {need}")
        if ex.inputs.get("conversation") is not None:
            from greval.dataset.records import normalise_conversation  # the one reader of conversations

            try:
                normalise_conversation(ex.inputs["conversation"], "")
            except DataError as exc:
                raise SpecError(source, f"{here}.inputs.conversation", str(exc).removeprefix(": ")) from None


def _load(path: str | Path) -> list[tuple[BaseSpec, str]]:
    """The specs of one file, each with where it sits in the file (``[i]`` in a list, else "")."""
    p = Path(path)
    name = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(name, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(name, "", f"cannot read: {exc}") from None
    try:
        data = read_yaml(text)
    except RefusedYAML as exc:
        raise SpecError(name, yaml_mark(exc), str(exc.problem)) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(name, yaml_mark(exc), f"YAML syntax error: {problem}") from None
    except RecursionError:  # MAX_DEPTH keeps the composer well away from this; a safety net
        raise SpecError(name, "", "nested too deeply") from None
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:  # a constructor choking on a value
        raise SpecError(name, "", f"cannot load the YAML: {exc}") from None
    if data is None:
        raise SpecError(name, "", "the file is empty")
    if isinstance(data, dict) and set(data) == {"specs"}:
        data = data["specs"]
    if isinstance(data, list):
        if not data:
            raise SpecError(name, "", "no specs in file (an empty list)")
        specs = [(parse_spec(item, name, f"[{i}]"), f"[{i}]") for i, item in enumerate(data)]
        names = [s.name for s, _ in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SpecError(name, "", f"two specs named {dup[0]!r} in one file")
    else:
        specs = [(parse_spec(data, name), "")]
    for spec, where in specs:
        if isinstance(spec, Spec):
            _check_examples(spec, name, where)
    return specs


def load_spec_file(path: str | Path) -> list[BaseSpec]:
    """Load a YAML file holding one spec, a list of specs, or ``specs: [...]``.

    ``depends_on`` is checked too: each dependency is in the file or predefined, and there is no cycle
    (counting the predefined specs the file would bring along, as ``greval run`` does).
    """
    loaded = _load(path)
    _check_dependencies(str(path), loaded)
    return [s for s, _ in loaded]


def load_spec(path: str | Path) -> BaseSpec:
    """The one spec a YAML file declares (:func:`load_spec_file` returns every spec of a file as a list).

    Raises :class:`greval.errors.SpecError` when the file holds several specs, naming them."""
    specs = load_spec_file(path)
    if len(specs) != 1:
        names = ", ".join(s.name for s in specs)
        raise SpecError(str(path), "", f"holds {len(specs)} specs ({names}); load_spec_file() returns them all")
    return specs[0]


def _check_dependencies(file: str, loaded: Sequence[tuple[BaseSpec, str]]) -> None:
    local = {s.name: where for s, where in loaded}
    graph: dict[str, list[str]] = {s.name: list(s.depends_on) for s, _ in loaded}
    library: dict[str, Path] = {}
    if any(d not in local for s, _ in loaded for d in s.depends_on):
        library = bundled_specs()
    for s, where in loaded:
        for i, dep in enumerate(s.depends_on):
            if dep not in local and dep not in library:
                hint = difflib.get_close_matches(dep, [*local, *library], n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else "; define it here or see `greval spec list`"
                raise SpecError(
                    file, field_at(where, f"depends_on[{i}]"), f"metric {dep!r} is neither given nor predefined{extra}"
                )
    pending = [d for deps in graph.values() for d in deps if d not in graph]
    while pending:  # the predefined specs `greval run` would add, and theirs
        dep = pending.pop()
        if dep in graph or dep not in library:
            continue
        found = next((s for s, _ in _load(library[dep]) if s.name == dep), None)
        graph[dep] = list(found.depends_on) if found else []
        pending.extend(d for d in graph[dep] if d not in graph)
    try:
        topological(list(local), lambda n: [d for d in graph.get(n, []) if d in graph])
    except Cycle as cycle:
        raise SpecError(file, field_at(local[cycle.root], "depends_on"), f"dependency cycle: {cycle}") from None


def bundled_specs() -> dict[str, Path]:
    """The predefined specs shipped with greval, by name."""
    out: dict[str, Path] = {}
    for f in sorted(metric_specs_dir().glob("*.yaml")):
        stat = f.stat()
        for name in _spec_names(f, stat.st_mtime_ns, stat.st_size):
            out[name] = f
    return out


#: PyYAML's LibYAML loader when it has one (ten times faster), for the names of the files greval ships.
_NAMES_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=256)
def _spec_names(path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The names of the specs in a predefined file, read without validating them: finding a dependency by
    name then parses only its own file (a judge spec's check does not import the pipeline judge, and with
    it LangChain). A file whose names cannot be read so is loaded in full, so its error is the usual one.
    Remembered per version of the file (a run asks twice); read with the fast loader, as these are greval's
    own files — the file a spec comes from is then loaded with :func:`read_yaml`'s checks."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_NAMES_LOADER)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError, RecursionError, yaml.YAMLError):
        data = None
    if isinstance(data, dict) and set(data) == {"specs"}:
        data = data["specs"]
    items = data if isinstance(data, list) else [data]
    names = [item.get("name") if isinstance(item, dict) else None for item in items]
    if not items or not all(isinstance(n, str) for n in names):
        return tuple(spec.name for spec, _ in _load(path))
    return tuple(n for n in names if isinstance(n, str))


def resolve_specs(refs: Sequence[str], with_dependencies: bool = True) -> list[BaseSpec]:
    """Turn command-line references (files, or names of predefined specs) into specs.

    Dependencies named in ``depends_on`` are added from the predefined library when not given, so
    ``--spec answer_completeness`` brings its chunk and triple evaluations along. The result is in
    dependency order. Without dependencies, the specs are ordered among themselves only. A spec may depend
    on a metric of another file given in ``refs``; errors name the file (and the spec's place in it).
    """
    specs: dict[str, BaseSpec] = {}
    origin: dict[str, tuple[str, str]] = {}  # name -> (file, where in the file), for errors
    library: dict[str, Path] | None = None
    for ref in refs:
        p = Path(ref)
        if p.suffix in (".yaml", ".yml", ".json") or p.exists():
            loaded = _load(p)  # dependencies are checked below, across every file given
            source = ref
        else:
            library = library if library is not None else bundled_specs()
            if ref not in library:
                hint = difflib.get_close_matches(ref, list(library), n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else f"; predefined: {', '.join(library)}"
                raise SpecError(ref, "", f"no such file or predefined spec{extra}")
            loaded = [(s, w) for s, w in _load(library[ref]) if s.name == ref]
            source = str(library[ref])
        for s, where in loaded:
            if s.name in specs and specs[s.name].hash != s.hash:
                raise SpecError(ref, field_at(where, "name"), f"two different specs are named {s.name!r}")
            specs[s.name] = s
            origin[s.name] = (source, where)
    if not with_dependencies:
        return order_specs(list(specs.values()), sources=origin, missing_ok=True)
    pending = [d for s in specs.values() for d in s.depends_on if d not in specs]
    while pending:
        dep = pending.pop()
        if dep in specs:
            continue
        library = library if library is not None else bundled_specs()
        if dep not in library:
            owner = next(s for s in specs.values() if dep in s.depends_on)
            file, where = origin[owner.name]
            at = field_at(where, f"depends_on[{owner.depends_on.index(dep)}]")
            hint = difflib.get_close_matches(dep, [*specs, *library], n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else "; see `greval spec list`"
            raise SpecError(file, at, f"metric {dep!r} is neither given nor predefined{extra}")
        for s, where in _load(library[dep]):
            if s.name == dep:
                specs[dep] = s
                origin[dep] = (str(library[dep]), where)
                pending.extend(d for d in s.depends_on if d not in specs)
    return order_specs(list(specs.values()), sources=origin)
