package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReleaseConfig holds deploy/goreleaser.yaml to the program: the version it stamps is the variable
// companion --version prints, the archives' files exist, and the program builds for every platform it
// names (go list resolves its files there: a package without a file for one, such as a lock of its own
// per system, fails).
func TestReleaseConfig(t *testing.T) {
	var cfg struct {
		Version int `json:"version"`
		Builds  []struct {
			Main    string   `json:"main"`
			Env     []string `json:"env"`
			Flags   []string `json:"flags"`
			Tags    []string `json:"tags"`
			Ldflags []string `json:"ldflags"`
			Goos    []string `json:"goos"`
			Goarch  []string `json:"goarch"`
		} `json:"builds"`
		Archives []struct {
			Files []string `json:"files"`
		} `json:"archives"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "deploy/goreleaser.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Version != 2 || len(cfg.Builds) != 1 || len(cfg.Archives) != 1 {
		t.Fatalf("goreleaser.yaml: version %d, %d builds, %d archives", cfg.Version, len(cfg.Builds), len(cfg.Archives))
	}
	b := cfg.Builds[0]
	if !slices.Contains(b.Env, "CGO_ENABLED=0") || !slices.Contains(b.Flags, "-trimpath") {
		t.Errorf("the build is not static and trimmed: env %v, flags %v", b.Env, b.Flags)
	}
	// The release's binaries and the image's are built with the same tags (nomsgpack: gin's MessagePack
	// binding, which nothing uses, left out).
	if !slices.Equal(b.Tags, []string{"nomsgpack"}) || !strings.Contains(read(t, "Dockerfile"), "-tags nomsgpack") {
		t.Errorf("build tags %v; want nomsgpack, as the Dockerfile's build", b.Tags)
	}
	const stamp = "-X github.com/replaysafe/companion/cmd/companion/cli.Version="
	if len(b.Ldflags) != 1 || !strings.Contains(b.Ldflags[0], stamp) || !strings.Contains(read(t, "Dockerfile"), stamp) ||
		!strings.Contains(read(t, "cmd/companion/cli/main.go"), "var Version = ") {
		t.Errorf("ldflags %v do not stamp cli.Version as the Dockerfile does", b.Ldflags)
	}
	if !slices.Equal(b.Goos, []string{"linux", "darwin", "windows"}) || !slices.Equal(b.Goarch, []string{"amd64", "arm64"}) {
		t.Errorf("platforms %v × %v", b.Goos, b.Goarch)
	}
	for _, f := range cfg.Archives[0].Files {
		if _, err := os.Stat(filepath.Join(repo, f)); err != nil {
			t.Errorf("archive file %s: %v", f, err)
		}
	}
	if !slices.Contains(cfg.Archives[0].Files, "LICENSE") || !slices.Contains(cfg.Archives[0].Files, "README.md") {
		t.Errorf("the archives hold %v, not LICENSE and README.md", cfg.Archives[0].Files)
	}
	for _, goos := range b.Goos {
		for _, goarch := range b.Goarch {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}", b.Main)
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
			if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
				t.Errorf("%s/%s: %v\n%s", goos, goarch, err, out)
			}
		}
	}
}
