package cli_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// envName is an environment variable of companion's own in the docs' words.
var envName = regexp.MustCompile(`\b(COMPANION|SLACK|MONGODB|POSTGRES)_[A-Z0-9_]*[A-Z0-9]\b`)

// readsEnv are the functions of the code that read the environment variable their string argument
// names: os.Getenv, os.LookupEnv, Main.Getenv and Main.env, the getenv a command is given, the set and
// secretFromEnv of the Slack settings, the env of the proxy settings.
var readsEnv = regexp.MustCompile(`^(Getenv|LookupEnv|getenv|env|set|secretFromEnv)$`)

// envTheCodeReads returns the environment variables the Go code of the repository reads, tests
// included (their variables are documented too): the string arguments, or constants, of the calls of
// readsEnv; and NAME_FILE for NAME read by a function that also reads its argument + "_FILE".
func envTheCodeReads(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != repoRoot) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "docs_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	str := func(e ast.Expr) string {
		if l, ok := e.(*ast.BasicLit); ok && l.Kind == token.STRING {
			s, _ := strconv.Unquote(l.Value)
			return s
		}
		return ""
	}
	consts := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) && str(vs.Values[i]) != "" {
						consts[name.Name] = str(vs.Values[i])
					}
				}
			}
			return true
		})
	}
	callee := func(c *ast.CallExpr) string {
		switch f := c.Fun.(type) {
		case *ast.Ident:
			return f.Name
		case *ast.SelectorExpr:
			return f.Sel.Name
		}
		return ""
	}
	value := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.Ident:
			return consts[e.Name]
		case *ast.SelectorExpr:
			return consts[e.Sel.Name]
		}
		return str(e)
	}
	// withFile are the functions that read name + "_FILE" too.
	withFile := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			var name string
			var body ast.Node
			switch n := n.(type) {
			case *ast.FuncDecl:
				name, body = n.Name.Name, n.Body
			case *ast.AssignStmt:
				if len(n.Lhs) == 1 && len(n.Rhs) == 1 {
					if id, ok := n.Lhs[0].(*ast.Ident); ok {
						if fl, ok := n.Rhs[0].(*ast.FuncLit); ok {
							name, body = id.Name, fl.Body
						}
					}
				}
			}
			if body == nil {
				return true
			}
			ast.Inspect(body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok && readsEnv.MatchString(callee(c)) && len(c.Args) > 0 {
					if b, ok := c.Args[0].(*ast.BinaryExpr); ok && b.Op == token.ADD && str(b.Y) == "_FILE" {
						withFile[name] = true
					}
				}
				return true
			})
			return true
		})
	}
	read := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok || !readsEnv.MatchString(callee(c)) {
				return true
			}
			for _, a := range c.Args {
				if v := value(a); envName.MatchString(v) {
					read[v] = true
					if withFile[callee(c)] {
						read[v+"_FILE"] = true
					}
				}
			}
			return true
		})
	}
	for _, must := range []string{"COMPANION_ADDR", "SLACK_BOT_TOKEN_FILE", "MONGODB_URI", "COMPANION_TEST_MONGODB_URI", "POSTGRES_URL_FILE", "COMPANION_TEST_POSTGRES_URL"} {
		if !read[must] {
			t.Fatalf("the code reads %s, and the reading of the code did not find it: it is wrong (found %v)", must, read)
		}
	}
	return read
}

// secretEnv is a configuration's secret_env: or a lookup header's {env: …}: the name of a variable that
// the deployment chooses, not one of companion's own.
var secretEnv = regexp.MustCompile(`(?:secret_env:|\{env:)\s*([A-Z_][A-Z0-9_]*)`)

// TestDocsEnvironmentVariables: every COMPANION_*, SLACK_* and MONGODB_* variable the docs name is one
// the code reads, but the names a configuration example chooses for its own secrets (secret_env:
// COMPANION_SECRET_N8N, and its _FILE form) and the variables of the compose file (deploy/.env).
func TestDocsEnvironmentVariables(t *testing.T) {
	read := envTheCodeReads(t)
	docs := docFiles(t)
	chosen := map[string]bool{}
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(repoRoot, d.name))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range secretEnv.FindAllStringSubmatch(string(b), -1) {
			chosen[m[1]], chosen[m[1]+"_FILE"] = true, true
		}
	}
	// The compose file's own variables (COMPANION_VERSION, COMPANION_POSTGRES_PASSWORD, …) are the
	// deployment's, defined in deploy/.env, as docker compose reads them.
	env, err := os.ReadFile(filepath.Join(repoRoot, "deploy", ".env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(string(env), -1) {
		chosen[m[1]] = true
	}
	n := 0
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(repoRoot, d.name))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, name := range envName.FindAllString(line, -1) {
				n++
				if !read[name] && !chosen[name] {
					t.Errorf("%s:%d: %s: the code reads no such environment variable", d.name, i+1, name)
				}
			}
		}
	}
	if n < 50 {
		t.Fatalf("found %d names of environment variables in the docs: the reading is wrong", n)
	}
}
