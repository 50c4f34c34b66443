package main

// The community node installed the two ways n8n-node/README.md writes, run as written: the shell block
// that installs the packed tarball into n8n's nodes folder (~ is the n8n user folder's parent, so ~/.n8n is
// the folder n8n reads), and the Docker custom-extension recipe (its unpacking run as written, its docker run
// read for the mount and the environment: the unpacked package copied where the mount puts it, n8n started
// with that N8N_CUSTOM_EXTENSIONS and no NODE_PATH). The node-family workflows then use the community type
// (n8n-nodes-companion.companion, from the nodes folder) except the Send Email one, which uses the custom
// extension's (CUSTOM.companion), and the install scenario runs a guarded write through each.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// nodeInstall is what the two installs left, for n8nEnv and scenarioInstall.
type nodeInstall struct {
	tarball    string
	home       string   // HOME of the nodes-folder install: ~/.n8n is N8N_USER_FOLDER/.n8n
	installed  []string // what npm put in ~/.n8n/nodes/node_modules
	extensions string   // N8N_CUSTOM_EXTENSIONS, as the recipe's docker run sets it, below the emulated root
	recipeEnv  []string // the -e options of the recipe's docker run
}

// readmeBlock returns the fenced code block of n8n-node/README.md that holds marker, its lines dedented.
func (e *env) readmeBlock(marker string) ([]string, error) {
	f, err := os.Open(filepath.Join(e.root, "n8n-node", "README.md"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var block []string
	in := false
	indent := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case !in && strings.HasPrefix(trimmed, "```"):
			in, indent, block = true, line[:len(line)-len(trimmed)], nil
		case in && strings.HasPrefix(trimmed, "```"):
			in = false
			if slices.ContainsFunc(block, func(l string) bool { return strings.Contains(l, marker) }) {
				return block, nil
			}
		case in:
			block = append(block, strings.TrimPrefix(line, indent))
		}
	}
	return nil, fmt.Errorf("n8n-node/README.md has no code block with %q: update e2e/n8n/runner/install.go with the README", marker)
}

// shell runs script with bash -e in dir with extra environment, and returns its output on failure.
func shell(ctx context.Context, dir, script string, env ...string) error {
	cmd := exec.CommandContext(ctx, "bash", "-ec", script)
	cmd.Dir = dir
	cmd.Env = append(withoutNodePath(os.Environ()), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", script, err, out)
	}
	return nil
}

// withoutNodePath drops NODE_PATH from an environment: the installs must work without it.
func withoutNodePath(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "NODE_PATH=") })
}

// installNode installs the packed tarball (E2E_NODE_TARBALL, packed by run.sh) both ways the README writes.
func (e *env) installNode(ctx context.Context) (*nodeInstall, error) {
	in := &nodeInstall{tarball: os.Getenv("E2E_NODE_TARBALL")}
	if in.tarball == "" {
		return nil, errors.New("E2E_NODE_TARBALL is not set: run the e2e through e2e/n8n/run.sh, which packs n8n-node")
	}
	name := filepath.Base(in.tarball)

	// 1. Into n8n's nodes folder.
	block, err := e.readmeBlock("npm install --legacy-peer-deps")
	if err != nil {
		return nil, err
	}
	script := strings.Join(block, "\n")
	if !strings.Contains(script, "/path/to/"+name) {
		return nil, fmt.Errorf("the README installs /path/to/<tarball>, not %s (the packed version): %q", name, script)
	}
	script = strings.ReplaceAll(script, "/path/to/"+name, in.tarball)
	in.home = filepath.Join(e.work, "n8n")
	if err := os.MkdirAll(in.home, 0o755); err != nil {
		return nil, err
	}
	if err := shell(ctx, in.home, script, "HOME="+in.home); err != nil {
		return nil, fmt.Errorf("the README's install into ~/.n8n/nodes: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(in.home, ".n8n", "nodes", "node_modules"))
	if err != nil {
		return nil, err
	}
	for _, de := range entries {
		if !strings.HasPrefix(de.Name(), ".") {
			in.installed = append(in.installed, de.Name())
		}
	}

	// 2. The Docker recipe: the unpacking as written, in a folder holding the tarball; then what docker run
	// would do, read from its options.
	block, err = e.readmeBlock("tar xzf")
	if err != nil {
		return nil, err
	}
	docker := filepath.Join(e.work, "docker")
	if err := os.MkdirAll(docker, 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(in.tarball, filepath.Join(docker, name)); err != nil {
		return nil, err
	}
	var unpack, run []string
	for _, l := range block {
		if strings.HasPrefix(l, "docker run") || len(run) > 0 {
			run = append(run, l)
		} else {
			unpack = append(unpack, l)
		}
	}
	if !strings.Contains(strings.Join(unpack, "\n"), name) {
		return nil, fmt.Errorf("the README's recipe unpacks another tarball than %s: %q", name, unpack)
	}
	if err := shell(ctx, docker, strings.Join(unpack, "\n")); err != nil {
		return nil, fmt.Errorf("the README's Docker recipe: %w", err)
	}
	cmdline := strings.ReplaceAll(strings.Join(run, " "), "\\", " ")
	mount := regexp.MustCompile(`-v "\$PWD/([^:"]+):([^"]+)"`).FindStringSubmatch(cmdline)
	if mount == nil {
		return nil, fmt.Errorf("the README's docker run mounts no $PWD folder: %q", cmdline)
	}
	root := filepath.Join(e.work, "container")
	if err := os.CopyFS(filepath.Join(root, mount[2]), os.DirFS(filepath.Join(docker, mount[1]))); err != nil {
		return nil, fmt.Errorf("the recipe's mount: %w", err)
	}
	for _, m := range regexp.MustCompile(`-e ([A-Z0-9_]+)=(\S+)`).FindAllStringSubmatch(cmdline, -1) {
		in.recipeEnv = append(in.recipeEnv, m[1]+"="+m[2])
		if m[1] == "N8N_CUSTOM_EXTENSIONS" {
			in.extensions = filepath.Join(root, m[2])
		}
	}
	if in.extensions == "" {
		return nil, fmt.Errorf("the README's docker run sets no N8N_CUSTOM_EXTENSIONS: %q", cmdline)
	}
	return in, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// scenarioInstall: the README's two installs as run at setup. npm put the package alone in ~/.n8n/nodes (its
// peer n8n-workflow not pulled in); the recipe sets no NODE_PATH and n8n runs without one; and a guarded write
// goes through each: the community type from the nodes folder (an HTTP write, one record) and CUSTOM.companion
// from the custom extension (Send Email, one message).
func scenarioInstall(ctx context.Context, e *env) error {
	in := e.install
	if fmt.Sprint(in.installed) != "[n8n-nodes-companion]" {
		return fmt.Errorf("npm install --legacy-peer-deps put %v in ~/.n8n/nodes/node_modules, want the package alone", in.installed)
	}
	for _, kv := range append(slices.Clone(in.recipeEnv), e.n8nEnv(0)...) {
		if strings.HasPrefix(kv, "NODE_PATH=") {
			return fmt.Errorf("n8n runs with %s: the installs must work without it", kv)
		}
	}
	body, key, ref := reminder(7104)
	out, err := e.runNode(nodePath, body, 200)
	if err != nil {
		return fmt.Errorf("through %s: %w", nodeCommunityType, err)
	}
	if err := e.expectWrittenOnce(key, ref, out); err != nil {
		return fmt.Errorf("through %s: %w", nodeCommunityType, err)
	}
	body, key, _ = reminder(7105)
	if _, err := e.runNode(nodeEmailPath, body, 200); err != nil {
		return fmt.Errorf("through %s: %w", nodeCustomType, err)
	}
	return e.expectMail(key, "succeeded", 1, 1)
}
