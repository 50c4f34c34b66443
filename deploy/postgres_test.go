package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPostgresInitScript runs deploy/postgres/init-data.sh and companion-schema.sh as the postgres image
// runs its init scripts at a database's first start (psql as the superuser, the compose file's variables), against this machine's PostgreSQL
// in a database of its own, then logs in as each role over TCP with its password: n8n's role creates its
// tables in public; companion's role creates its ledger's tables in its schema, found by the role's own
// search_path, and can neither read n8n's tables nor create anything in public.
func TestPostgresInitScript(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("no psql on this machine")
	}
	if os.Geteuid() != 0 {
		t.Skip("the script runs as the postgres user (peer authentication, as in the image): needs root")
	}
	super := func(sql string) (string, error) {
		out, err := exec.Command("runuser", "-u", "postgres", "--", "psql", "-v", "ON_ERROR_STOP=1", "-Atqc", sql).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if _, err := super("SELECT 1"); err != nil {
		t.Skipf("no PostgreSQL to reach as postgres on this machine: %v", err)
	}
	suffix := fmt.Sprintf("%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	db, n8n, companion := "deploy_init_"+suffix, "n8n_"+suffix, "companion_"+suffix
	if out, err := super("CREATE DATABASE " + db); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() {
		_, _ = super("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)")
		_, _ = super("DROP ROLE IF EXISTS " + n8n)
		_, _ = super("DROP ROLE IF EXISTS " + companion)
	})
	for _, name := range []string{"init-data.sh", "companion-schema.sh"} { // the entrypoint's order
		script, err := filepath.Abs(filepath.Join("postgres", name))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("runuser", "-u", "postgres", "--", "bash", script)
		cmd.Dir = "/"
		cmd.Env = append(os.Environ(), "POSTGRES_USER=postgres", "POSTGRES_DB="+db,
			"POSTGRES_NON_ROOT_USER="+n8n, "POSTGRES_NON_ROOT_PASSWORD=n8n-pw-"+suffix,
			"COMPANION_POSTGRES_USER="+companion, "COMPANION_POSTGRES_PASSWORD=companion-pw-"+suffix)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	as := func(role, password, sql string) (string, error) {
		url := fmt.Sprintf("postgres://%s:%s@127.0.0.1:5432/%s?sslmode=disable", role, password, db)
		out, err := exec.Command("psql", url, "-v", "ON_ERROR_STOP=1", "-Atqc", sql).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := as(n8n, "n8n-pw-"+suffix, "CREATE TABLE public.workflow_entity (id int); INSERT INTO workflow_entity VALUES (1)"); err != nil {
		t.Fatalf("n8n's role: %v: %s", err, out)
	}
	if out, err := as(companion, "companion-pw-"+suffix, "CREATE TABLE items (key text PRIMARY KEY); SELECT current_schema()"); err != nil || out != "companion" {
		t.Fatalf("companion's role in its schema: %v: %q", err, out)
	}
	for _, sql := range []string{"SELECT * FROM public.workflow_entity", "CREATE TABLE public.stray (id int)"} {
		if out, err := as(companion, "companion-pw-"+suffix, sql); err == nil || !strings.Contains(out, "permission denied") {
			t.Errorf("companion's role: %s: %v %q, want permission denied", sql, err, out)
		}
	}
	if out, err := as(n8n, "n8n-pw-"+suffix, "SELECT * FROM companion.items"); err == nil || !strings.Contains(out, "permission denied") {
		t.Errorf("n8n's role reads companion's ledger: %v %q", err, out)
	}
}
