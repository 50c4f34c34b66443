package cli

import (
	"io"
	"unicode/utf8"

	"github.com/replaysafe/companion/items"
)

// terminalText is a writer for what the commands print of the ledger's data: every control character
// but tab and newline, and every bidi override, is written escaped (\u001b; items.EscapeControls), so that
// a reference holding ESC[2J or an OSC sequence, stored before the API refused them, cannot act on the
// terminal that prints it. JSON printed through it stays JSON: such characters can stand only inside its
// strings, where the escape means the same character.
type terminalText struct {
	w io.Writer
	// partial holds the first bytes of a character a write ended inside of, until the next write ends it.
	partial []byte
}

// Write implements io.Writer. It reports len(p) when the escaped text was written whole.
func (t *terminalText) Write(p []byte) (int, error) {
	b := append(t.partial, p...)
	t.partial = nil
	cut := len(b)
	for i := max(0, len(b)-utf8.UTFMax+1); i < len(b); i++ {
		if utf8.RuneStart(b[i]) && !utf8.FullRune(b[i:]) {
			cut = i
			break
		}
	}
	t.partial = append([]byte(nil), b[cut:]...)
	if _, err := io.WriteString(t.w, items.EscapeControls(string(b[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// printingData runs a command that prints the ledger's data with its standard output and error behind
// terminalText.
func (m *Main) printingData(run func() error) error {
	out, errOut := m.Stdout, m.Stderr
	m.Stdout, m.Stderr = &terminalText{w: out}, &terminalText{w: errOut}
	defer func() { m.Stdout, m.Stderr = out, errOut }()
	return run()
}
