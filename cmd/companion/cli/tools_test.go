package cli_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/replaysafe/companion/cmd/companion/cli"
)

// companion receiver serves the sandbox receiver until the program is closed.
func TestReceiverServesUntilClosed(t *testing.T) {
	p := newProgram(nil)
	if err := p.Run(context.Background(), []string{"receiver", "--addr", "127.0.0.1:0"}); err != nil {
		t.Fatalf("receiver: %v", err)
	}
	defer p.Close()
	addr := regexp.MustCompile(`http://127\.0\.0\.1:\d+`)
	var base string
	for deadline := time.Now().Add(5 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		base = addr.FindString(p.out.String())
	}
	if base == "" {
		t.Fatalf("no start line with the address:\n%s", p.out)
	}
	resp, err := http.Get(base + "/effects")
	if err != nil {
		t.Fatalf("GET /effects: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /effects = %d", resp.StatusCode)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := http.Get(base + "/effects"); err == nil {
		t.Errorf("the receiver still answers after Close")
	}
}

// companion templates render writes the n8n workflows and Make blueprints with the given service URL.
func TestTemplatesRender(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rendered")
	p := newProgram(nil)
	if err := p.Run(context.Background(), []string{"templates", "render", "--url", "https://companion.example.org", "--out", out}); err != nil {
		t.Fatalf("templates render: %v\n%s", err, p.err)
	}
	var found int
	filepath.Walk(out, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && filepath.Ext(path) == ".json" {
			b, _ := os.ReadFile(path)
			if regexp.MustCompile(`https://companion\.example\.org`).Match(b) {
				found++
			}
		}
		return nil
	})
	if found < 4 {
		t.Errorf("%d rendered templates name the given URL, want at least 4", found)
	}

	// Again with the same flags: the same bytes, a quiet success. Over an edited file: exit 2, the file
	// named and kept. With --force: replaced.
	args := []string{"templates", "render", "--url", "https://companion.example.org", "--out", out}
	if err := newProgram(nil).Run(context.Background(), args); err != nil {
		t.Fatalf("the same render again: %v", err)
	}
	edited := filepath.Join(out, "make-templates", "guarded-write.blueprint.json")
	if err := os.WriteFile(edited, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := newProgram(nil).Run(context.Background(), args)
	if cli.ExitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), edited) || !strings.Contains(fmt.Sprint(err), "give --force to replace them") {
		t.Errorf("render over an edited file: exit %d, %v; want 2 naming %s and --force", cli.ExitCode(err), err, edited)
	}
	if b, _ := os.ReadFile(edited); string(b) != "{}\n" {
		t.Errorf("render over an edited file replaced it")
	}
	if err := newProgram(nil).Run(context.Background(), append(args, "--force")); err != nil {
		t.Fatalf("render --force: %v", err)
	}
	if b, _ := os.ReadFile(edited); string(b) == "{}\n" {
		t.Errorf("render --force kept the edited file")
	}
}

// A receiver whose address is taken says so once ("receiver: …", not "receiver: receiver: …") and
// names the flag that moves it; its other errors lose the doubled prefix too.
func TestReceiverErrorsSayWhatToDo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", ln.Addr().String()}, "receiver: cannot listen on " + ln.Addr().String() + ": the address is already in use"},
		{[]string{"--addr=" + ln.Addr().String()}, "choose another address with --addr, e.g. --addr 127.0.0.1:"},
		{[]string{"--addr", "127.0.0.1:0", "--smtp-addr", ln.Addr().String()},
			"receiver: cannot listen on " + ln.Addr().String() + ": the address is already in use (another companion, or another program, " +
				"listens there): stop it, or choose another address with --smtp-addr, e.g. --smtp-addr 127.0.0.1:"},
		{[]string{"--addr", "127.0.0.1:0", "--dedupe", "maybe"}, `receiver: --dedupe must be key or none, not "maybe"`},
		// A data dir that cannot be made: what to give instead, without the library's "sandbox:".
		{[]string{"--addr", "127.0.0.1:0", "--data-dir", filepath.Join(notADir, "data")}, "receiver: --data-dir: mkdir " + notADir + ": not a directory; " +
			"give a directory this user can write, or leave --data-dir out to keep the records in memory"},
	} {
		p := newProgram(nil)
		if err := p.Run(context.Background(), append([]string{"receiver"}, tc.args...)); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := p.Wait(ctx)
		cancel()
		p.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "receiver: receiver:") ||
			strings.Contains(err.Error(), "sandbox:") {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// A command-line mistake reads the same in every command, also in those whose flags another package
// parses (receiver, templates render, acceptance): an unknown flag with two dashes and the flag it most
// likely meant (a letter away, or the only one it begins), not the flag package's "flag provided but not
// defined: -ur"; and exit 2, as README.md says, where receiver and templates render exited 1. A mistyped
// command gets the command it most likely meant.
func TestFlagMistakesOfEveryCommandSayWhatWasMeantAndExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sever"}, `unknown command "sever" (did you mean serve? run "companion help" for the list)`},
		{[]string{"help", "itmes"}, `unknown command "itmes" (did you mean items?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"; run "companion help" for the list`},
		{[]string{"serve", "--adr", "x"}, `serve: unknown flag --adr (did you mean --addr? run "companion serve --help")`},
		{[]string{"serve", "--data", "x"}, `serve: unknown flag --data (did you mean --data-dir? run "companion serve --help")`},
		{[]string{"templates", "render", "--ur", "http://x", "--out", "y"}, `templates render: unknown flag --ur (did you mean --url? run "companion templates render --help")`},
		{[]string{"templates", "render", "--url", "companion.example.com", "--out", "y"}, `templates render: --url: want an absolute http(s) URL, got "companion.example.com"`},
		{[]string{"templates", "render", "--url", "http://x"}, "templates render: --out is required"},
		{[]string{"acceptance", "--onl", "5"}, `acceptance: unknown flag --onl (did you mean --only? run "companion acceptance --help")`},
		{[]string{"receiver", "--adr", "127.0.0.1:0"}, `receiver: unknown flag --adr (did you mean --addr? run "companion receiver --help")`},
		{[]string{"receiver", "--key-retention", "soon"}, `receiver: invalid value "soon" for flag -key-retention`},
		{[]string{"receiver", "--addr"}, `receiver: --addr needs a value (--addr VALUE or --addr=VALUE) (run "companion receiver --help")`},
	} {
		p := newProgram(nil)
		err := p.Run(context.Background(), tc.args)
		if err == nil && tc.args[0] == "receiver" { // a long-running command: its mistake ends it
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = p.Wait(ctx)
			cancel()
		}
		p.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "receiver: receiver:") {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
		if code := cli.ExitCode(err); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%v)", tc.args, code, err)
		}
	}
}

// templates render into an --out it cannot write says so under its own name, with what to give instead.
func TestTemplatesRenderIntoAFileSaysWhatToGive(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProgram(nil)
	err := p.Run(context.Background(), []string{"templates", "render", "--out", file})
	p.Close()
	if want := "templates render: cannot write into --out " + file + " (mkdir " + file + ": not a directory): give a folder this user can write"; err == nil ||
		!strings.Contains(err.Error(), want) {
		t.Errorf("%v; want %q", err, want)
	}
}
