"""The optimized HLO text of a compiled XLA module, parsed, and the kernel names it implies.

A fully jitted RL step is one opaque call to rlscope: its GPU kernels carry no Python operation.
But XLA names each kernel it generates after the HLO instruction (mostly a fusion) it emits, and
every instruction keeps the ``jax.named_scope`` path it was traced under in
``metadata={op_name="jit(step)/rollout/while/body/.../inference/dot_general"}``. This module parses
``jax.jit(f).lower(...).compile().as_text()``; ``rlscope.analyze.hlo_scopes`` reads the user's
scopes out of it and ``rlscope.analyze.hlo_join`` joins recorded kernels to them. Pure text
analysis: nothing here imports JAX.

Kernel names, as XLA's GPU emitters make them (openxla/xla): the MLIR fusion emitters
(``xla/backends/gpu/codegen/emitters/emitter_base.cc``, ``EmitterBase::Emit``) and Triton fusions
(``xla/backends/gpu/codegen/triton/fusion.cc``) name the kernel
``name_uniquer->GetUniqueName(llvm_ir::SanitizeFunctionName(fusion.name()))``.
``SanitizeFunctionName`` (``xla/service/llvm_ir/llvm_util.cc``) maps every character outside
``[A-Za-z0-9_$]`` to ``_``, prefixes ``_`` to a leading digit, and turns an empty name into
``__unnamed`` and ``_``/``$`` into ``__``/``$_``; ``NameUniquer::GetSanitizedName``
(``xla/service/name_uniquer.cc``, separator ``__``) then maps ``$`` to ``_``, appends ``_`` to
primitive type names and rewrites a leading ``__`` (but ``__xla_``) to ``a_``; a second
instruction whose name sanitises the same gets ``__<n>`` appended. The same emitters look each
fused computation up in a ``KernelReuseCache`` first: an identical one reuses the kernel (and so
the name) of the first fusion emitted: ``rlscope.analyze.hlo_join`` treats such fusions as aliases.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from rlscope.errors import TraceError

__all__ = ["Instruction", "HloModule", "parse_hlo", "kernel_name", "fingerprint"]

# Instructions that never launch a kernel of their own.
_NO_KERNEL = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while", "conditional",
                        "call", "after-all", "opt-barrier"})
_PRIMITIVE_TYPE = re.compile(r"(pred|token|opaque|[suf]\d+|bf16|c64|c128|f\d+e\d+m\d+\w*)")

_HEADER = re.compile(r"(ENTRY\s+)?%?(\S+)\s+\(.*->.*\{")
_INSTRUCTION = re.compile(r"(ROOT\s+)?%?([^\s=]+)\s+=\s+(.*)")
_OPCODE = re.compile(r"\s*([\w\-]+)\(")
_CALLED = re.compile(r"\b(calls|to_apply|body|condition|branch_computations|true_computation|false_computation)="
                     r"(\{[^}]*\}|%?[\w.\-]+)")
_KIND = re.compile(r"\bkind=(k\w+)")
_TARGET = re.compile(r'\bcustom_call_target="([^"]*)"')
_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')
_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_OPERAND = re.compile(r"%([\w.\-]+)")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_BARE = re.compile(r"[^,\s]*")


@dataclass(frozen=True)
class Instruction:
    """One HLO instruction: what it is, what it calls, and where JAX says it came from."""

    name: str
    opcode: str
    computation: str
    text: str  # everything after "name = ", for fingerprints
    is_root: bool = False
    operands: tuple[str, ...] = ()
    op_name: str = ""
    fusion_kind: str = ""
    called: dict[str, tuple[str, ...]] = field(default_factory=dict)
    custom_call_target: str = ""
    deduplicated_name: str = ""

    @property
    def is_fusion(self) -> bool:
        return self.opcode == "fusion"

    @property
    def fused_computation(self) -> str:
        return self.called.get("calls", ("",))[0] if self.is_fusion else ""


@dataclass(frozen=True)
class HloModule:
    """A parsed module: its computations in text order, each a tuple of instructions."""

    name: str
    entry: str
    computations: dict[str, tuple[Instruction, ...]]

    def root(self, computation: str) -> Instruction:
        return next(i for i in self.computations[computation] if i.is_root)

    def fusion_body(self, fusion: Instruction) -> list[Instruction]:
        """Every instruction a fusion's kernel runs, nested fusions' bodies included (not reducers,
        whose shared regions carry whichever metadata XLA kept when it deduplicated them)."""
        body: list[Instruction] = []
        for inst in self.computations.get(fusion.fused_computation, ()):
            body.extend(self.fusion_body(inst) if inst.is_fusion else [inst])
        return body

    def launch_sites(self) -> list[Instruction]:
        """Instructions that can launch kernels: those outside fused bodies and reducer regions,
        reached from ENTRY through while/conditional/call bodies."""
        found: list[Instruction] = []
        todo, seen = [self.entry], {self.entry}
        while todo:
            for inst in self.computations.get(todo.pop(), ()):
                if inst.opcode not in _NO_KERNEL:
                    found.append(inst)
                for role, names in inst.called.items():
                    if inst.is_fusion or (role == "to_apply" and inst.opcode != "call"):
                        continue
                    todo.extend(n for n in names if n not in seen)
                    seen.update(names)
        return found


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    """Index just past the bracket matching ``text[start]``, skipping quoted strings."""
    depth, quoted, i = 0, False, start
    while i < len(text):
        c = text[i]
        if quoted:
            i += c == "\\"
            quoted = c != '"'
        elif c == '"':
            quoted = True
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _block(attrs: str, key: str) -> tuple[str, str]:
    """The inside of ``key={...}`` or ``key="..."``, and the attributes without it."""
    m = re.search(rf"(,\s*)?\b{key}=", attrs)
    if m is None:
        return "", attrs
    start = m.end()
    if attrs.startswith("{", start):
        end = _closing(attrs, start, "{", "}")
    else:
        end = (_QUOTED.match(attrs, start) or _BARE.match(attrs, start)).end()
    inside = attrs[start:end]
    return (inside[1:-1] if inside[:1] in ("{", '"') else inside), attrs[:m.start()] + attrs[end:]


def _metadata(attrs: str) -> tuple[dict[str, str], str]:
    """The ``metadata={...}`` fields, and the attributes without that block."""
    inside, rest = _block(attrs, "metadata")
    fields = {k: v[1:-1].replace('\\"', '"').replace("\\\\", "\\") if v.startswith('"') else v
              for k, v in _FIELD.findall(inside)}
    return fields, rest


def _instruction(line: str, computation: str) -> Instruction | None:
    m = _INSTRUCTION.fullmatch(line.strip())
    if m is None:
        return None
    rest = m.group(3)
    shape_end = _closing(rest, 0, "(", ")") if rest.startswith("(") else rest.find(" ")
    op = _OPCODE.match(rest, max(shape_end, 0))
    if op is None:
        return None
    close = _closing(rest, op.end() - 1, "(", ")")
    inside, attrs = rest[op.end():close - 1], rest[close:]
    bare = (t.split()[-1] for t in inside.split(",") if t.strip())
    operands = tuple(_OPERAND.findall(inside) if "%" in inside else bare)
    meta, attrs = _metadata(attrs)
    called = {role: tuple(_NAME.findall(names)) for role, names in _CALLED.findall(attrs)}
    kind, target = _KIND.search(attrs), _TARGET.search(attrs)
    return Instruction(name=m.group(2), opcode=op.group(1), computation=computation, text=rest,
                       is_root=bool(m.group(1)), operands=operands, op_name=meta.get("op_name", ""),
                       fusion_kind=kind.group(1) if kind else "", called=called,
                       custom_call_target=target.group(1) if target else "",
                       deduplicated_name=meta.get("deduplicated_name", ""))


def parse_hlo(text: str) -> HloModule:
    """Parse the text of one optimized HLO module (``Compiled.as_text()``, or an XLA dump's
    ``*.after_optimizations.txt``)."""
    name, entry, current = "", "", None
    computations: dict[str, list[Instruction]] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if current is None:
            if stripped.startswith("HloModule "):
                name = stripped.split()[1].rstrip(",")
            elif (header := _HEADER.fullmatch(stripped)) is not None:
                current = header.group(2)
                computations[current] = []
                entry = current if header.group(1) else entry
        elif stripped == "}":
            current = None
        elif (inst := _instruction(stripped, current)) is not None:
            computations[current].append(inst)
    if not entry:
        raise TraceError(f"HLO module {name or '(unnamed)'}: no ENTRY computation found; expected the text of "
                         "Compiled.as_text() or an XLA dump's *after_optimizations.txt")
    return HloModule(name=name, entry=entry, computations={k: tuple(v) for k, v in computations.items()})


def kernel_name(instruction_name: str) -> str:
    """The name XLA's GPU backend gives the kernel it emits for an instruction (module docstring)."""
    s = re.sub(r"[^A-Za-z0-9_$]", "_", instruction_name) or "__unnamed"
    s = "_" + s if s[0].isdigit() else s
    s = s + "_" if s in ("_", "$") else s
    s = ("_" if not (s[0].isalpha() or s[0] == "_") else s[0]) + s[1:].replace("$", "_")
    s = s + "_" if _PRIMITIVE_TYPE.fullmatch(s) else s
    return "a" + s[1:] if s.startswith("__") and not s.startswith("__xla_") else s


def fingerprint(module: HloModule, computation: str, _memo: dict[str, str] | None = None) -> str:
    """A hash of a computation's structure without names or metadata: equal for the fused bodies
    XLA's kernel reuse cache may treat as one kernel (it also compares arguments, so equal
    fingerprints are a superset of real reuse)."""
    memo = {} if _memo is None else _memo
    if computation not in memo:
        insts = module.computations.get(computation, ())
        index = {i.name: f"#{n}" for n, i in enumerate(insts)}

        def canonical(m: re.Match) -> str:
            name = m.group(1)
            if name in index:
                return index[name]
            return fingerprint(module, name, memo) if name in module.computations else m.group(0)

        lines = []
        for inst in insts:
            text = inst.text
            for key in ("metadata", "backend_config", "frontend_attributes"):
                text = _block(text, key)[1]
            lines.append(("ROOT " if inst.is_root else "") + _NAME.sub(canonical, text))
        memo[computation] = hashlib.sha1("\n".join(lines).encode()).hexdigest()[:16]
    return memo[computation]
