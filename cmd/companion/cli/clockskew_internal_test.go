package cli

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// TestMaxClockSkew: max_clock_skew defaults to 2 s, with or without a configuration file, and takes a
// duration or whole seconds.
func TestMaxClockSkew(t *testing.T) {
	m := &Main{Getenv: func(string) string { return "" }}
	f, err := m.settings(serveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := f.cfg; cfg.MaxClockSkew != items.DefaultMaxClockSkew || items.DefaultMaxClockSkew != 2*time.Second {
		t.Fatalf("without a file: max_clock_skew %s, want 2s", f.cfg.MaxClockSkew)
	}
	for yaml, want := range map[string]time.Duration{"": 2 * time.Second, "max_clock_skew: 5s\n": 5 * time.Second,
		"max_clock_skew: 3\n": 3 * time.Second, "max_clock_skew: 0s\n": 0} {
		path := filepath.Join(t.TempDir(), "companion.yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, _, _, err := loadConfig(path, func(string) string { return "" })
		if err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if cfg.MaxClockSkew != want {
			t.Errorf("%q: max_clock_skew %s, want %s", yaml, cfg.MaxClockSkew, want)
		}
	}
}
