"""The subset of YAML that Megatron-LM's functional-test configs use, read with the standard library.

Block mappings and sequences nested by indentation, plain / single-quoted / double-quoted scalars
(a plain scalar may continue on more-indented lines), block scalars (| and >), comments, anchors
(&NAME), aliases (*NAME) and merge keys (<<: *NAME). Scalars stay strings with their source text
(1e-6 stays "1e-6", as yq prints it); an empty value is None. Flow collections are kept as their
source text. Anything else raises YamlError naming the line.
"""

import re


class YamlError(ValueError):
    pass


_KEY_RE = re.compile(r"""^(?:"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"][^:#]*?|<<)\s*:(?:\s|$)""")


def _strip_comment(text):
    """Drop a trailing '# ...' comment that is outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == "\\" and quote == '"':
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"" and (i == 0 or text[i - 1] in " \t:[{,"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _unquote(text, lineno):
    text = text.strip()
    if text.startswith("'"):
        if len(text) < 2 or not text.endswith("'"):
            raise YamlError(f"line {lineno}: unterminated single-quoted scalar")
        return text[1:-1].replace("''", "'")
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            raise YamlError(f"line {lineno}: unterminated double-quoted scalar")
        body, out, i = text[1:-1], [], 0
        escapes = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "/": "/", " ": " ",
                   "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "v": "\v"}
        while i < len(body):
            ch = body[i]
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            nxt = body[i + 1] if i + 1 < len(body) else ""
            if nxt in escapes:
                out.append(escapes[nxt])
                i += 2
            elif nxt in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[nxt]
                out.append(chr(int(body[i + 2:i + 2 + width], 16)))
                i += 2 + width
            else:
                raise YamlError(f"line {lineno}: unknown escape \\{nxt}")
        return "".join(out)
    return text


class _Parser:
    def __init__(self, text):
        self.raw = text.split("\n")
        self.anchors = {}

    def _content(self, i):
        """(indent, text without comment) of line i, or None for a blank or comment-only line."""
        line = self.raw[i].rstrip("\r")
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise YamlError(f"line {i + 1}: tab in indentation")
        text = _strip_comment(line)
        if not text.strip():
            return None
        return len(text) - len(text.lstrip(" ")), text.strip()

    def _next(self, i):
        while i < len(self.raw) and self._content(i) is None:
            i += 1
        return i

    def parse(self):
        i = self._next(0)
        if i >= len(self.raw):
            return {}
        indent, _ = self._content(i)
        node, i = self._block(i, indent)
        i = self._next(i)
        if i < len(self.raw):
            raise YamlError(f"line {i + 1}: unexpected indentation")
        return node

    def _block(self, i, indent):
        _, text = self._content(i)
        if text == "-" or text.startswith("- "):
            return self._sequence(i, indent)
        return self._mapping(i, indent)

    def _sequence(self, i, indent):
        items = []
        while True:
            i = self._next(i)
            if i >= len(self.raw):
                break
            ind, text = self._content(i)
            if ind != indent or not (text == "-" or text.startswith("- ")):
                break
            rest = text[1:].strip()
            if rest:
                items.append(self._inline_value(rest, i + 1))
                i += 1
            else:
                j = self._next(i + 1)
                if j < len(self.raw) and self._content(j)[0] > indent:
                    node, i = self._block(j, self._content(j)[0])
                    items.append(node)
                else:
                    items.append(None)
                    i += 1
        return items, i

    def _mapping(self, i, indent):
        result = {}
        while True:
            i = self._next(i)
            if i >= len(self.raw):
                break
            ind, text = self._content(i)
            if ind < indent:
                break
            if ind > indent:
                raise YamlError(f"line {i + 1}: unexpected indentation")
            m = _KEY_RE.match(text)
            if not m:
                raise YamlError(f"line {i + 1}: expected 'key: value', got {text!r}")
            key = _unquote(text[: m.end()].rstrip().rstrip(":").rstrip(), i + 1)
            rest = text[m.end():].strip()
            anchor = None
            if rest.startswith("&"):
                anchor, _, rest = rest[1:].partition(" ")
                rest = rest.strip()
            if rest.startswith("*"):
                name = rest[1:].strip()
                if name not in self.anchors:
                    raise YamlError(f"line {i + 1}: unknown alias *{name}")
                value = self.anchors[name]
                i += 1
            elif rest[:1] in ("|", ">"):
                value, i = self._block_scalar(i, indent, rest)
            elif rest:
                value, i = self._plain_continued(i, indent, rest)
            else:
                j = self._next(i + 1)
                if j < len(self.raw):
                    jind, jtext = self._content(j)
                    if jind > indent and not _KEY_RE.match(jtext) and not (jtext == "-" or jtext.startswith("- ")):
                        value, i = self._plain_continued(i, indent, "")
                    elif jind > indent or (jind == indent and (jtext == "-" or jtext.startswith("- "))):
                        value, i = self._block(j, jind)
                    else:
                        value, i = None, i + 1
                else:
                    value, i = None, i + 1
            if anchor:
                self.anchors[anchor] = value
            if key == "<<":
                if not isinstance(value, dict):
                    raise YamlError(f"line {i}: merge key needs a mapping")
                for k, v in value.items():
                    result.setdefault(k, v)
            else:
                result[key] = value
        return result, i

    def _plain_continued(self, i, indent, first):
        """A scalar starting on line i after the key, continued on more-indented non-key lines."""
        if first[:1] in ("'", '"'):
            return _unquote(first, i + 1), i + 1
        if first[:1] in ("[", "{"):
            return first, i + 1  # flow collection: kept as source text
        parts = [first] if first else []
        i += 1
        while True:
            j = self._next(i)
            if j >= len(self.raw):
                break
            jind, jtext = self._content(j)
            if jind <= indent:
                break
            parts.append(jtext)
            i = j + 1
        return " ".join(parts), i

    def _block_scalar(self, i, indent, header):
        lines, i = [], i + 1
        block_indent = None
        while i < len(self.raw):
            line = self.raw[i].rstrip("\r")
            if line.strip():
                ind = len(line) - len(line.lstrip(" "))
                if ind <= indent:
                    break
                if block_indent is None:
                    block_indent = ind
                lines.append(line[block_indent:])
            else:
                lines.append("")
            i += 1
        while lines and not lines[-1]:
            lines.pop()
        joiner = "\n" if header.startswith("|") else " "
        text = joiner.join(lines)
        if not header.endswith("-"):
            text += "\n"
        return text, i

    def _inline_value(self, text, lineno):
        if text[:1] in ("'", '"'):
            return _unquote(text, lineno)
        return text


def load(text):
    """Parse YAML text (the subset above) into dicts, lists and strings (None for empty values)."""
    return _Parser(text).parse()
