// Package deploy_test holds the tests of the deployment kit in this folder: the compose files load under
// the Compose specification's own loader (compose-go, which Docker Compose uses), the Kubernetes
// manifests decode strictly into k8s.io/api's types, and every image, port, secret and variable they
// name is one the service, n8n or the image really has. The folder holds no Go code but these tests: the
// loaders stay out of the companion binary.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/replaysafe/companion/cmd/companion/cli"
	"github.com/replaysafe/companion/handlers/handlerstest"
)

// repo is the repository's root, seen from this folder.
const repo = ".."

// image is the image the Dockerfile builds, as the release publishes it (.goreleaser.yaml).
const image = "ghcr.io/replaysafe/companion"

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dockerfile is what the root Dockerfile's final stage declares.
type dockerfile struct {
	user        string
	env         map[string]string
	expose      string
	healthcheck []string
	entrypoint  []string
	goImage     string
}

// readDockerfile reads the instructions of the root Dockerfile's last stage (continued lines joined).
func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	var lines []string
	var cur string
	sc := bufio.NewScanner(strings.NewReader(read(t, "Dockerfile")))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cur += s + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	d := dockerfile{env: map[string]string{}}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		switch strings.ToUpper(instr) {
		case "ARG":
			if v, ok := strings.CutPrefix(rest, "GO_IMAGE="); ok {
				d.goImage = v
			}
		case "FROM":
			d.env = map[string]string{} // a new stage
		case "USER":
			d.user = rest
		case "EXPOSE":
			d.expose = rest
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				d.env[k] = v
			}
		case "HEALTHCHECK":
			_, cmd, _ := strings.Cut(rest, "CMD ")
			if err := json.Unmarshal([]byte(cmd), &d.healthcheck); err != nil {
				t.Fatalf("HEALTHCHECK is not in exec form: %s", l)
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT is not in exec form: %s", l)
			}
		}
	}
	return d
}

// run runs the companion program in this process with args and env, and returns what it printed.
func run(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	m := cli.NewMain()
	out := &handlerstest.SyncBuffer{}
	m.Stdout, m.Stderr = out, out
	m.Getenv = func(k string) string { return env[k] }
	if err := m.Run(context.Background(), args); err != nil {
		t.Fatalf("companion %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	m.Close()
	return out.String()
}

var (
	serviceVarsOnce sync.Once
	serviceVars     map[string]bool
)

// envWord is an environment variable's name as the help and the docs write it.
var envWord = regexp.MustCompile(`\b[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]\b|\bGO[A-Z]+\b`)

// theServiceReads returns the environment variables companion serve reads: those its --help names, and
// those of the variable table of docs/configuration.md (its first table).
func theServiceReads(t *testing.T) map[string]bool {
	t.Helper()
	serviceVarsOnce.Do(func() {
		serviceVars = map[string]bool{}
		for _, v := range envWord.FindAllString(run(t, nil, "serve", "--help"), -1) {
			serviceVars[v] = true
		}
		doc := read(t, "docs/configuration.md")
		start := strings.Index(doc, "| flag | environment |")
		end := strings.Index(doc[start:], "\n\n")
		for _, row := range strings.Split(doc[start:start+end], "\n") {
			cells := strings.Split(row, "|")
			if len(cells) < 4 {
				continue
			}
			for _, v := range envWord.FindAllString(cells[2]+cells[4], -1) { // the environment and what columns
				serviceVars[v] = true
			}
		}
	})
	return serviceVars
}

// n8nVersion is the n8n the e2e proves the templates in (e2e/n8n/package.json).
func n8nVersion(t *testing.T) string {
	t.Helper()
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal([]byte(read(t, "e2e/n8n/package.json")), &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.Dependencies["n8n"] == "" {
		t.Fatal("e2e/n8n/package.json pins no n8n")
	}
	return pkg.Dependencies["n8n"]
}

// n8nHostingVars are the variables n8n's own compose files (github.com/n8n-io/n8n-hosting,
// docker-compose/withPostgres, withPostgresAndWorker, docker-caddy) give n8n and its runners.
var n8nHostingVars = []string{"DB_TYPE", "DB_POSTGRESDB_HOST", "DB_POSTGRESDB_PORT", "DB_POSTGRESDB_DATABASE",
	"DB_POSTGRESDB_USER", "DB_POSTGRESDB_PASSWORD", "EXECUTIONS_MODE", "QUEUE_BULL_REDIS_HOST", "QUEUE_HEALTH_CHECK_ACTIVE",
	"N8N_ENCRYPTION_KEY", "N8N_RUNNERS_MODE", "N8N_RUNNERS_AUTH_TOKEN", "N8N_RUNNERS_BROKER_LISTEN_ADDRESS",
	"N8N_RUNNERS_TASK_BROKER_URI", "OFFLOAD_MANUAL_EXECUTIONS_TO_WORKERS", "N8N_HOST", "N8N_PORT", "N8N_PROTOCOL",
	"NODE_ENV", "WEBHOOK_URL", "GENERIC_TIMEZONE"}

// n8nReads returns the variables known to reach n8n: n8n-hosting's, and those the e2e gives the pinned
// n8n (e2e/n8n/runner), which the e2e's scenarios depend on.
func n8nReads(t *testing.T) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	for _, v := range n8nHostingVars {
		vars[v] = true
	}
	for _, v := range regexp.MustCompile(`"((?:N8N|DB|EXECUTIONS)_[A-Z0-9_]+)=`).FindAllStringSubmatch(read(t, "e2e/n8n/runner/main.go"), -1) {
		vars[v[1]] = true
	}
	return vars
}

// n8nCode returns the JavaScript of the pinned n8n where it is installed (bash e2e/n8n/install.sh), to
// find a variable's name in; nil when it is not, or not yet whole (the install's marker is written last:
// .ci/run installs n8n while the Go tests run).
func n8nCode(t *testing.T) [][]byte {
	t.Helper()
	modules := filepath.Join(repo, "e2e/n8n/.work/npm/node_modules")
	if _, err := os.Stat(filepath.Join(modules, ".companion-installed")); err != nil {
		return nil
	}
	var code [][]byte
	for _, dir := range []string{"n8n/dist", "@n8n/config/dist", "n8n-core/dist", "@n8n/task-runner/dist"} {
		_ = filepath.WalkDir(filepath.Join(modules, dir), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".js") {
				if b, err := os.ReadFile(path); err == nil {
					code = append(code, b)
				}
			}
			return nil
		})
	}
	return code
}

// inCode reports whether name stands quoted, or as process.env.NAME, in code.
func inCode(code [][]byte, name string) bool {
	for _, c := range code {
		if bytes.Contains(c, []byte(`'`+name+`'`)) || bytes.Contains(c, []byte(`"`+name+`"`)) || bytes.Contains(c, []byte("env."+name)) {
			return true
		}
	}
	return false
}

// unknownVars returns the names of vars that known lacks, sorted.
func unknownVars(vars []string, known map[string]bool) []string {
	var out []string
	for _, v := range vars {
		if !known[v] {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// startServe runs companion serve in this process (SQLite in a temporary folder, a free loopback port)
// until the test ends, and returns its address.
func startServe(t *testing.T) string {
	t.Helper()
	m := cli.NewMain()
	out := &handlerstest.SyncBuffer{}
	m.Stdout, m.Stderr = out, out
	dir := t.TempDir()
	m.Getenv = func(k string) string { return map[string]string{"COMPANION_DATA_DIR": dir}[k] }
	if err := m.Run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0"}); err != nil {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	t.Cleanup(func() { m.Close() })
	return m.Addr()
}

// call asks GET path of the service at addr without a token and returns the status and body.
func call(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
