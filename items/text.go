package items

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text that people read back (a terminal running companion items show, the console, a Slack message) must
// not be able to act on what shows it: an ESC or OSC sequence clears a screen, sets a window title or
// writes the clipboard; a bidi override makes a reference read as another. So:
//
//   - the fields that name things (reference, destination, owner, workflow, execution_id) are refused when
//     they hold such a character (TextProblem): a name has no use for one;
//   - free text a report carries (evidence, an error's message) is never refused for its characters, so no
//     report is lost for the bytes of an error some node produced: it is kept with those characters
//     escaped (EscapeControls);
//   - whatever prints stored text escapes it again (EscapeControls), for text stored before these rules.

// controlOrBidi reports whether r is a C0 or C1 control character, DEL, or a Unicode bidi override,
// embedding or isolate (U+202A-U+202E, U+2066-U+2069).
func controlOrBidi(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// TextProblem says what is wrong with s as the text of a field that names something, or "": a control
// character (C0, DEL, C1) or a bidi override, which would act on the terminal or the page that shows it.
func TextProblem(s string) string {
	i := strings.IndexFunc(s, controlOrBidi)
	if i < 0 {
		return ""
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	at := utf8.RuneCountInString(s[:i]) + 1
	if r >= 0x202a {
		return fmt.Sprintf("holds the bidi control U+%04X (character %d), which changes how text around it is shown; send plain text", r, at)
	}
	return fmt.Sprintf("holds the control character U+%04X (character %d); send printable text only", r, at)
}

// EscapeControls returns s with every control character other than tab and newline, and every bidi
// override, written as \u001b (six printable characters); the rest is kept as it is.
func EscapeControls(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		if r != '\t' && r != '\n' && controlOrBidi(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// needsEscape reports whether s holds a character EscapeControls changes, without decoding the common
// text: only bytes below 0x20 and DEL, and the lead bytes of C1 (0xC2) and of the bidi controls (0xE2),
// can start one.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\t' || c == '\n':
		case c < 0x20 || c == 0x7f:
			return true
		case c == 0xc2 || c == 0xe2:
			r, _ := utf8.DecodeRuneInString(s[i:])
			if controlOrBidi(r) {
				return true
			}
		}
	}
	return false
}

// escapeWithin is EscapeControls(s) cut to at most max characters, never inside an escape.
func escapeWithin(s string, max int) string {
	if !needsEscape(s) {
		if utf8.RuneCountInString(s) > max {
			return string([]rune(s)[:max])
		}
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		piece := string(r)
		if r != '\t' && r != '\n' && controlOrBidi(r) {
			piece = fmt.Sprintf(`\u%04x`, r)
		}
		size := utf8.RuneCountInString(piece)
		if n+size > max {
			break
		}
		b.WriteString(piece)
		n += size
	}
	return b.String()
}
