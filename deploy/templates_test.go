package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/replaysafe/companion/blueprints"
)

// TestDockerStepsRenderEveryTemplate: every n8n template of the repository is rendered by the Docker
// steps of deploy/README.md and imported by them: the generated ones by the compose file's templates
// service (companion templates render, into the folder n8n imports), the hand-written ones by n8n's
// image (deploy/n8n/Dockerfile, whose sed runs here on the file as the build runs it), for this compose
// file: the node's type is the one n8n's image loads the node as (N8N_CUSTOM_EXTENSIONS: CUSTOM), and the
// write goes to the compose file's receiver, not to 127.0.0.1 inside n8n's container.
func TestDockerStepsRenderEveryTemplate(t *testing.T) {
	readme := read(t, "deploy/README.md")
	files, err := filepath.Glob(filepath.Join(repo, blueprints.N8nDir, "*.json"))
	if err != nil || len(files) < 8 {
		t.Fatalf("n8n templates %v: %v", files, err)
	}
	rendered, err := blueprints.Render(blueprints.DefaultSettings())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(readme, "import:workflow --separate --input=/templates/"+blueprints.N8nDir) {
		t.Errorf("deploy/README.md does not import the folder the templates service renders")
	}
	dockerfile := read(t, "deploy/n8n/Dockerfile")
	sed := regexp.MustCompile(`sed((?: -e '[^']*')+)\s*\\?\s*/templates/([a-z-]+\.json) > /out-templates/([a-z-]+\.json)`).FindAllStringSubmatch(dockerfile, -1)
	byImage := map[string][]string{}
	for _, m := range sed {
		byImage[m[2]] = regexp.MustCompile(`-e '([^']*)'`).FindAllString(m[1], -1)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if _, ok := rendered[blueprints.N8nDir+"/"+name]; ok {
			continue // rendered by companion templates render in the templates service
		}
		exprs, ok := byImage[name]
		if !ok {
			t.Errorf("%s is neither rendered by companion templates render nor by deploy/n8n/Dockerfile", name)
			continue
		}
		if !strings.Contains(readme, "import:workflow --input=/opt/companion-templates/"+name) {
			t.Errorf("deploy/README.md does not import %s from n8n's image", name)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out := string(b)
		for _, e := range exprs {
			e = strings.TrimSuffix(strings.TrimPrefix(e, "-e '"), "'")
			sep := e[1:2]
			parts := strings.Split(e[2:], sep)
			if e[0] != 's' || len(parts) != 3 {
				t.Fatalf("deploy/n8n/Dockerfile: the sed expression %q is not s/…/…/", e)
			}
			out = regexp.MustCompile(parts[0]).ReplaceAllLiteralString(out, parts[1])
		}
		var wf struct {
			Nodes []struct {
				Type       string         `json:"type"`
				Parameters map[string]any `json:"parameters"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(out), &wf); err != nil {
			t.Fatalf("%s as the image renders it is not JSON: %v", name, err)
		}
		var types []string
		for _, n := range wf.Nodes {
			types = append(types, n.Type)
		}
		if !slices.Contains(types, "CUSTOM.companion") || slices.Contains(types, "n8n-nodes-companion.companion") {
			t.Errorf("%s as the image renders it has the node types %v: n8n's image loads the node as CUSTOM.companion", name, types)
		}
		if strings.Contains(out, "127.0.0.1") || !strings.Contains(out, "http://receiver:9090/records") {
			t.Errorf("%s as the image renders it does not write to the compose file's receiver (http://receiver:9090/records)", name)
		}
	}
}
