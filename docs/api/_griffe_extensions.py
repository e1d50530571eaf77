"""Griffe extensions used by the API reference (mkdocs.yml). They read the source only; nothing is
imported.

* ``ModuleProperties``: a module can give itself properties by swapping its class for a
  ``types.ModuleType`` subclass (``sys.modules[__name__].__class__ = _Module``), as
  ``layernorm.rnn.fused`` does for ``USE_NATIVE``. Static analysis sees those properties only as
  members of the private class; this adds each one to its module as an attribute, with the
  property's docstring (or, without one, the class's), so that a public name listed in
  ``__all__`` gets its own entry.
* ``DocumentedInstanceAttributes``: the reference shows module attributes and methods without
  docstrings (their values and signatures say something), but an instance attribute without one
  (``self.eps = check_eps(eps, ...)``) only repeats a constructor argument the class docstring
  describes, with a value that is an implementation detail; those are left out.
"""
from __future__ import annotations

import griffe


class ModuleProperties(griffe.Extension):
    def on_module(self, *, mod: griffe.Module, **kwargs) -> None:
        source = mod.source if mod.filepath else ""
        for cls in list(mod.classes.values()):
            if "types.ModuleType" not in {str(b) for b in cls.bases}:
                continue
            if f"__class__ = {cls.name}" not in source:
                continue
            for name, member in cls.members.items():
                if "property" not in member.labels or name in mod.members:
                    continue
                doc = member.docstring or cls.docstring
                attr = griffe.Attribute(name, lineno=member.lineno, endlineno=member.endlineno,
                                        annotation=getattr(member, "annotation", None))
                attr.labels |= {"module-attribute"} | (member.labels & {"writable"})
                if doc is not None:
                    attr.docstring = griffe.Docstring(doc.value, lineno=doc.lineno,
                                                      endlineno=doc.endlineno, parent=attr,
                                                      parser=doc.parser,
                                                      parser_options=doc.parser_options)
                mod.set_member(name, attr)


class DocumentedInstanceAttributes(griffe.Extension):
    def on_class_members(self, *, cls: griffe.Class, **kwargs) -> None:
        for name, member in list(cls.members.items()):
            if (member.is_attribute and "instance-attribute" in member.labels
                    and member.docstring is None):
                cls.del_member(name)
