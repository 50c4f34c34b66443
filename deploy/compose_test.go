package deploy_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	composecli "github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads the compose files as docker compose does from deploy/ (its .env read), with the
// given profiles; the secret files the README makes need not exist.
func loadCompose(t *testing.T, files []string, profiles ...string) *types.Project {
	t.Helper()
	opts, err := composecli.NewProjectOptions(files, composecli.WithWorkingDirectory("."), composecli.WithName("companion"),
		composecli.WithEnvFiles(), composecli.WithDotEnv, composecli.WithProfiles(profiles))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%v do not load under the Compose specification: %v", files, err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("no service %s (services: %v)", name, slices.Sorted(maps.Keys(p.Services)))
	}
	return s
}

func envNames(s types.ServiceConfig) []string { return slices.Sorted(maps.Keys(s.Environment)) }

func env(s types.ServiceConfig, name string) string {
	if v := s.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// TestComposeLoads loads deploy/compose.yaml (with and without its TLS profiles, and with the MongoDB
// file over it) and holds what it names to what the service, n8n and the image really have.
func TestComposeLoads(t *testing.T) {
	d := readDockerfile(t)
	pin := n8nVersion(t)

	p := loadCompose(t, []string{"compose.yaml"})
	if got := slices.Sorted(maps.Keys(p.Services)); !slices.Equal(got, []string{"companion", "n8n", "n8n-runner", "postgres", "receiver", "templates"}) {
		t.Errorf("services without a profile: %v", got)
	}
	// Nothing published but n8n's and companion's ports.
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if !(name == "n8n" && port.Target == 5678 || name == "companion" && port.Target == 8080) {
				t.Errorf("%s publishes %d", name, port.Target)
			}
		}
	}

	companion := service(t, p, "companion")
	_, port, _ := strings.Cut(d.env["COMPANION_ADDR"], ":")
	if len(companion.Ports) != 1 || companion.Ports[0].Published != port || d.expose != port || port != "8080" {
		t.Errorf("companion's port: compose %v, the image's COMPANION_ADDR %s, EXPOSE %s", companion.Ports, d.env["COMPANION_ADDR"], d.expose)
	}
	for _, name := range []string{"companion", "templates", "receiver"} {
		s := service(t, p, name)
		if repo, _, _ := strings.Cut(s.Image, ":"); repo != image || s.Build == nil || s.Build.Context != filepath.Dir(mustAbs(t, ".")) {
			t.Errorf("%s: image %s built from %v, want %s from the repository's Dockerfile", name, s.Image, s.Build, image)
		}
	}
	if unknown := unknownVars(envNames(companion), theServiceReads(t)); len(unknown) > 0 {
		t.Errorf("companion is given variables companion serve --help and docs/configuration.md do not name: %v", unknown)
	}
	checkSecrets(t, p, companion)
	if companion.HealthCheck == nil || !slices.Equal(companion.HealthCheck.Test, append([]string{"CMD"}, d.healthcheck...)) {
		t.Errorf("companion's healthcheck %v, want the image's HEALTHCHECK %v", companion.HealthCheck, d.healthcheck)
	}
	if d.healthcheck[0] != d.entrypoint[0] || d.healthcheck[1] != "healthcheck" {
		t.Errorf("the image's HEALTHCHECK %v is not its program's healthcheck command (ENTRYPOINT %v)", d.healthcheck, d.entrypoint)
	}
	if env(companion, "POSTGRES_SCHEMA") != "companion" || !strings.Contains(read(t, "deploy/postgres/companion-schema.sh"), `schema="${COMPANION_POSTGRES_SCHEMA:-companion}"`) {
		t.Errorf("companion's schema %q is not the one postgres/companion-schema.sh makes", env(companion, "POSTGRES_SCHEMA"))
	}
	if c := companion.DependsOn["postgres"].Condition; c != types.ServiceConditionHealthy {
		t.Errorf("companion starts on postgres %q", c)
	}

	n8n := service(t, p, "n8n")
	if n8n.Image != "companion-n8n:"+pin || n8n.Build == nil || n8n.Build.Dockerfile != "deploy/n8n/Dockerfile" || *n8n.Build.Args["N8N_VERSION"] != pin {
		t.Errorf("n8n: image %s from %+v, want n8n %s (e2e/n8n/package.json) with the node", n8n.Image, n8n.Build, pin)
	}
	if !strings.Contains(read(t, "deploy/n8n/Dockerfile"), "ARG N8N_VERSION="+pin+"\n") || !strings.Contains(read(t, "deploy/n8n/Dockerfile"), "FROM docker.n8n.io/n8nio/n8n:${N8N_VERSION}") {
		t.Errorf("deploy/n8n/Dockerfile is not FROM n8n %s", pin)
	}
	if runner := service(t, p, "n8n-runner"); runner.Image != "n8nio/runners:"+pin {
		t.Errorf("n8n-runner: %s, want n8nio/runners:%s", runner.Image, pin)
	}
	for _, dep := range []string{"postgres", "companion"} {
		if c := n8n.DependsOn[dep].Condition; c != types.ServiceConditionHealthy {
			t.Errorf("n8n starts on %s %q, want service_healthy", dep, c)
		}
	}
	if c := n8n.DependsOn["templates"].Condition; c != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("n8n starts on templates %q", c)
	}
	known := n8nReads(t)
	for _, name := range []string{"n8n", "n8n-runner"} {
		if unknown := unknownVars(envNames(service(t, p, name)), known); len(unknown) > 0 {
			t.Errorf("%s is given variables neither n8n-hosting's files nor the e2e give n8n: %v", name, unknown)
		}
	}
	if code := n8nCode(t); code == nil {
		t.Logf("the pinned n8n is not installed here (bash e2e/n8n/install.sh): its code is not searched for the variables")
	} else {
		for _, name := range []string{"n8n", "n8n-runner"} {
			for _, v := range envNames(service(t, p, name)) {
				if !inCode(code, v) {
					t.Errorf("%s: n8n %s's code does not read %s", name, pin, v)
				}
			}
		}
	}
	postgres := service(t, p, "postgres")
	if postgres.Image != "postgres:16" {
		t.Errorf("postgres: %s, want n8n-hosting's postgres:16", postgres.Image)
	}
	initScript := read(t, "deploy/postgres/init-data.sh") + read(t, "deploy/postgres/companion-schema.sh")
	for _, v := range envNames(postgres) {
		if !slices.Contains([]string{"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}, v) && !strings.Contains(initScript, "${"+v) {
			t.Errorf("postgres is given %s, which neither the postgres image nor its init scripts read", v)
		}
	}

	// The one-shot services run companion commands that exist, with flags they take: templates render for
	// real (into a temporary folder), the receiver's flags against its help.
	templates := service(t, p, "templates")
	args := slices.Clone([]string(templates.Command))
	out := t.TempDir()
	args[slices.Index(args, "--out")+1] = out
	run(t, nil, args...)
	if b, err := os.ReadFile(filepath.Join(out, "n8n-templates", "guarded-write.json")); err != nil || !strings.Contains(string(b), `"http://companion:8080"`) ||
		!strings.Contains(string(b), "http://receiver:9090/records") {
		t.Errorf("templates render %v: guarded-write.json does not call companion and the receiver at their compose names (%v)", templates.Command, err)
	}
	receiver := service(t, p, "receiver")
	help := run(t, nil, "receiver", "--help")
	for _, a := range receiver.Command {
		if strings.HasPrefix(a, "--") && !strings.Contains(help, "  "+a+"\n") {
			t.Errorf("receiver %s: no such flag in its help", a)
		}
	}
	if receiver.Command[slices.Index([]string(receiver.Command), "--addr")+1] != "0.0.0.0:9090" || !strings.Contains(string(mustRead(t, filepath.Join(out, "n8n-templates", "guarded-write.json"))), "receiver:9090") {
		t.Errorf("the receiver listens on %v, not where the templates write", receiver.Command)
	}

	// TLS in front: one profile each, publishing only the proxy's ports, with the names from .env.
	for _, profile := range []string{"caddy", "nginx"} {
		p := loadCompose(t, []string{"compose.yaml"}, profile)
		proxy := service(t, p, profile)
		for _, port := range proxy.Ports {
			if port.Target != 443 && port.Target != 80 {
				t.Errorf("%s publishes %d", profile, port.Target)
			}
		}
		config := read(t, map[string]string{"caddy": "deploy/caddy/Caddyfile", "nginx": "deploy/nginx/default.conf.template"}[profile])
		for _, v := range envNames(proxy) {
			if !strings.Contains(config, "{$"+v+"}") && !strings.Contains(config, "${"+v+"}") {
				t.Errorf("%s is given %s, which its configuration does not use", profile, v)
			}
		}
		wants := map[string][]string{
			"caddy": {"reverse_proxy companion:8080", "reverse_proxy n8n:5678", "max_size 2MB", "response_header_timeout 75s"},
			"nginx": {"proxy_pass http://companion:8080", "proxy_pass http://n8n:5678", "client_max_body_size 2m",
				"proxy_set_header X-Forwarded-Proto $scheme", "proxy_read_timeout 75s"},
		}[profile]
		for _, want := range wants {
			if !strings.Contains(config, want) {
				t.Errorf("%s's configuration lacks %q", profile, want)
			}
		}
	}

	// MongoDB instead of PostgreSQL: the file over compose.yaml.
	m := loadCompose(t, []string{"compose.yaml", "compose.mongodb.yaml"})
	mc := service(t, m, "companion")
	if _, ok := mc.Environment["POSTGRES_URL_FILE"]; ok || env(mc, "MONGODB_URI_FILE") == "" {
		t.Errorf("with compose.mongodb.yaml companion is given %v", envNames(mc))
	}
	if unknown := unknownVars(envNames(mc), theServiceReads(t)); len(unknown) > 0 {
		t.Errorf("with MongoDB companion is given variables companion serve --help and docs/configuration.md do not name: %v", unknown)
	}
	checkSecrets(t, m, mc)
	members := 0
	for name, s := range m.Services {
		if strings.HasPrefix(name, "mongo") && slices.Contains(s.Command, "--replSet") {
			members++
			if len(s.Ports) > 0 {
				t.Errorf("%s publishes its port", name)
			}
		}
	}
	uri := regexp.MustCompile(`(?m)^COMPANION_MONGODB_URI=(.*)$`).FindStringSubmatch(read(t, "deploy/.env"))
	if members != 3 || uri == nil || strings.Count(uri[1], ":27017") != 3 || !strings.Contains(uri[1], "replicaSet=rs0") {
		t.Errorf("MongoDB: %d replica set members, URI %v", members, uri)
	}
}

// checkSecrets holds a service's *_FILE variables to its secrets: each names /run/secrets/<a secret it
// mounts>, each secret it mounts is named, and each is defined.
func checkSecrets(t *testing.T, p *types.Project, s types.ServiceConfig) {
	t.Helper()
	mounted := map[string]bool{}
	for _, sec := range s.Secrets {
		mounted[sec.Source] = true
		if _, ok := p.Secrets[sec.Source]; !ok {
			t.Errorf("%s mounts secret %s, which is not defined", s.Name, sec.Source)
		}
	}
	named := map[string]bool{}
	for _, v := range envNames(s) {
		if !strings.HasSuffix(v, "_FILE") {
			continue
		}
		secret, ok := strings.CutPrefix(env(s, v), "/run/secrets/")
		if !ok || !mounted[secret] {
			t.Errorf("%s: %s=%s is not a secret it mounts", s.Name, v, env(s, v))
		}
		named[secret] = true
	}
	for sec := range mounted {
		if !named[sec] {
			t.Errorf("%s mounts secret %s, which no variable names", s.Name, sec)
		}
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
