"""WebArena's action grammar: parse a model's reply into an `Action`, or raise `ActionError` saying why not.

    click [id]            type [id] [text] [press_enter_after=0|1]      hover [id]
    press [key_comb]      scroll [down|up]      new_tab      tab_focus [i]      close_tab
    goto [url]            go_back               go_forward   stop [answer]

As WebArena's parser: the action may sit in a reply; the last ```-fenced block is taken when there is one,
else the whole text. The verb's case and surrounding whitespace are tolerated; `type` presses Enter after the
text unless told `[0]`; `stop` may carry no answer. Arguments are greedy up to the last `]`, so answers and
typed text may contain brackets. `goto` opens http(s) urls only (no file:// for an agent). Keys are Playwright
key names (`Enter`, `Control+a`, `PageDown`, `Meta+a`), checked here against Playwright's US keyboard layout
so a bad key never reaches the browser half-pressed.
Pure Python: nothing here needs a browser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VERBS = (
    "click",
    "type",
    "hover",
    "press",
    "scroll",
    "new_tab",
    "tab_focus",
    "close_tab",
    "goto",
    "go_back",
    "go_forward",
    "stop",
)

# Key names Playwright's keyboard accepts besides single US-layout characters: the layout's codes, the key
# values they produce, and Playwright's platform-neutral "ControlOrMeta".
_NAMED_KEYS = (
    "Escape F1 F2 F3 F4 F5 F6 F7 F8 F9 F10 F11 F12 Backquote Digit0 Digit1 Digit2 Digit3 Digit4 Digit5 Digit6 "
    "Digit7 Digit8 Digit9 Minus Equal Backslash Backspace Tab BracketLeft BracketRight CapsLock Semicolon Quote "
    "Enter ShiftLeft ShiftRight ControlLeft ControlRight MetaLeft MetaRight AltLeft AltRight AltGraph Space "
    "ContextMenu PrintScreen ScrollLock Pause PageUp PageDown Insert Delete Home End ArrowLeft ArrowUp ArrowRight "
    "ArrowDown AudioVolumeMute AudioVolumeDown AudioVolumeUp MediaTrackNext MediaTrackPrevious MediaPlayPause "
    "NumLock NumpadDivide NumpadMultiply NumpadSubtract NumpadAdd NumpadDecimal NumpadEnter Numpad0 Numpad1 "
    "Numpad2 Numpad3 Numpad4 Numpad5 Numpad6 Numpad7 Numpad8 Numpad9 Comma Period Slash Clear "
    "Shift Control Alt Meta ControlOrMeta " + " ".join(f"Key{c}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
).split()
_KEYS_BY_LOWER = {k.lower(): k for k in _NAMED_KEYS}

_FENCE = re.compile(r"```(.*?)```", re.DOTALL)
_VERB = re.compile(r"([A-Za-z_]+)(?![A-Za-z_])(.*)", re.DOTALL)
_ID = re.compile(r"\[\s*(\d+)\s*\]")
_BRACKETED = re.compile(r"\[(.*)\]", re.DOTALL)  # greedy: from the first `[` to the last `]`
_TYPE_WITH_FLAG = re.compile(r"\[\s*(\d+)\s*\]\s*\[(.*)\]\s*\[\s*([01])\s*\]", re.DOTALL)
_TYPE_NO_FLAG = re.compile(r"\[\s*(\d+)\s*\]\s*\[(.*)\]", re.DOTALL)


class ActionError(ValueError):
    """A malformed action, or one the current page cannot take (an id not on it). The episode goes on."""


@dataclass(frozen=True)
class Action:
    """One parsed action. Only the fields of its `kind` are set; `str(action)` is its canonical text."""

    kind: str
    element_id: int | None = None  # click, type, hover
    text: str = ""  # type: the text; goto: the url; stop: the answer (verbatim)
    press_enter_after: bool = False  # type
    key: str = ""  # press: canonical Playwright key combination
    direction: str = ""  # scroll: "up" | "down"
    tab: int | None = None  # tab_focus

    def __str__(self) -> str:
        if self.kind in ("click", "hover"):
            return f"{self.kind} [{self.element_id}]"
        if self.kind == "type":
            return f"type [{self.element_id}] [{self.text}] [{int(self.press_enter_after)}]"
        if self.kind == "press":
            return f"press [{self.key}]"
        if self.kind == "scroll":
            return f"scroll [{self.direction}]"
        if self.kind == "tab_focus":
            return f"tab_focus [{self.tab}]"
        if self.kind in ("goto", "stop"):
            return f"{self.kind} [{self.text}]"
        return self.kind


def extract(reply: str) -> str:
    """The action text of a model's reply: its last ```-fenced block (minus a language tag), else the reply."""
    blocks = _FENCE.findall(reply)
    if not blocks:
        return reply.strip()
    block = blocks[-1].strip()
    first, _, rest = block.partition("\n")
    # "```text\nclick [3]\n```": a first line that is one bare word and no verb is a language tag.
    if rest.strip() and re.fullmatch(r"[A-Za-z0-9_+-]+", first.strip()) and first.strip().lower() not in VERBS:
        return rest.strip()
    return block


def parse(reply: str) -> Action:
    """Parse one action from `reply` (see the module docstring for the grammar)."""
    text = extract(reply)
    if not text:
        raise ActionError(f"no action found; expected one of: {', '.join(VERBS)}")
    m = _VERB.match(text)
    verb, args = (m.group(1).lower(), m.group(2).strip()) if m else ("", text)
    if verb not in VERBS:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise ActionError(f"unknown action {shown!r}; expected one of: {', '.join(VERBS)}")

    if verb in ("click", "hover"):
        m = _ID.fullmatch(args)
        if not m:
            raise ActionError(f"{verb} needs one numeric element id, as `{verb} [12]`; got {text!r}")
        return Action(verb, element_id=int(m.group(1)))
    if verb == "type":
        m = _TYPE_WITH_FLAG.fullmatch(args) or _TYPE_NO_FLAG.fullmatch(args)
        if not m:
            raise ActionError(
                f"type needs an element id and a text, as `type [12] [blue mug] [1]` (the last [0|1] says whether "
                f"to press Enter after, default 1); got {text!r}"
            )
        enter = m.lastindex < 3 or m.group(3) == "1"
        return Action("type", element_id=int(m.group(1)), text=m.group(2), press_enter_after=enter)
    if verb == "press":
        return Action("press", key=_key_combination(_one_argument(verb, args, text, "press [Control+a]")))
    if verb == "scroll":
        # WebArena also takes `scroll down` without brackets.
        direction = (args if not args.startswith("[") else _one_argument(verb, args, text, "scroll [down]")).strip()
        direction = direction.lower()
        if direction not in ("up", "down"):
            raise ActionError(f"scroll takes [up] or [down]; got {text!r}")
        return Action("scroll", direction=direction)
    if verb == "tab_focus":
        m = _ID.fullmatch(args)
        if not m:
            raise ActionError(f"tab_focus needs a tab index, as `tab_focus [0]`; got {text!r}")
        return Action("tab_focus", tab=int(m.group(1)))
    if verb == "goto":
        url = _one_argument(verb, args, text, "goto [http://example.com/]").strip()
        if not url:
            raise ActionError("goto needs a url, as `goto [http://example.com/]`")
        if not (url.lower().startswith(("http://", "https://")) or url == "about:blank"):
            raise ActionError(f"goto opens http(s) urls (and about:blank); got {url!r}")
        return Action("goto", text=url)
    if verb == "stop":
        if not args:
            return Action("stop")
        return Action("stop", text=_one_argument(verb, args, text, "stop [answer]"))
    if args:
        raise ActionError(f"{verb} takes no argument; got {text!r}")
    return Action(verb)


def _one_argument(verb: str, args: str, text: str, example: str) -> str:
    m = _BRACKETED.fullmatch(args)
    if not m:
        raise ActionError(f"{verb} needs its argument in brackets, as `{example}`; got {text!r}")
    return m.group(1)


def _key_combination(combo: str) -> str:
    """Check `combo` against Playwright's key names and return it with each named key in canonical case."""
    combo = combo.strip()
    if not combo:
        raise ActionError("press needs a key, as `press [Enter]` or `press [Control+a]`")
    # Playwright's own split: a "+" right after another "+" (or first) is the plus key itself.
    tokens, building = [], ""
    for char in combo:
        if char == "+" and building:
            tokens.append(building)
            building = ""
        else:
            building += char
    tokens.append(building)
    keys = []
    for token in tokens:
        if len(token) == 1 and " " <= token <= "~":
            keys.append(token)
        elif token.lower() in _KEYS_BY_LOWER:
            keys.append(_KEYS_BY_LOWER[token.lower()])
        else:
            raise ActionError(
                f"unknown key {token!r} in {combo!r}; use Playwright key names such as Enter, Tab, Escape, "
                f"Backspace, Delete, ArrowDown, PageDown, Home, End, F5, Control, Shift, Alt, Meta, or one character"
            )
    return "+".join(keys)
