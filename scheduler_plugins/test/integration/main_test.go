// Package integration runs coach-scheduler on the real local control plane
// (etcd, kube-apiserver, default kube-scheduler, coach-scheduler, simulated
// nodes), started once in TestMain with the binaries of deploy/local/build.
package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	client kubernetes.Interface
	root   string
)

// coach runs the `coach cluster` command of the repository's Python package:
// the one tool that starts and stops the control plane for users, tests and
// benchmarks alike.
func coach(args ...string) (string, error) {
	python := os.Getenv("COACH_PYTHON")
	if python == "" {
		python = filepath.Join(root, ".venv", "bin", "python")
		if _, err := os.Stat(python); err != nil {
			python = "python3"
		}
	}
	cmd := exec.Command(python, append([]string{"-m", "coach.cli.main", "cluster"}, args...)...)
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("coach cluster %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func TestMain(m *testing.M) {
	wd, _ := os.Getwd()
	root = filepath.Join(wd, "..", "..", "..")
	dir, err := os.MkdirTemp("", "coach-go-integration-")
	if err != nil {
		panic(err)
	}
	os.Setenv("COACH_CLUSTER_DIR", dir)
	out, err := coach("up", "--nodes", "2", "--cpu", "4", "--memory", "8Gi")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot start the local control plane (run deploy/local/build first; "+
			"COACH_PYTHON names the project's Python if it is not .venv/bin/python or python3):", err)
		os.Exit(1)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	cfg, err := clientcmd.BuildConfigFromFlags("", lines[len(lines)-1])
	if err == nil {
		client, err = kubernetes.NewForConfig(cfg)
	}
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
	} else {
		code = m.Run()
	}
	if _, err := coach("down"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}
