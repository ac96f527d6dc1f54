package secret

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("sk_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	if v, err := LoadFrom(env(map[string]string{"K": "sk_env", "K_FILE": file}), "K"); err != nil || v != "sk_env" {
		t.Errorf("env wins: %q, %v", v, err)
	}
	if v, err := LoadFrom(env(map[string]string{"K_FILE": file}), "K"); err != nil || v != "sk_from_file" {
		t.Errorf("file: %q, %v", v, err)
	}
	if _, err := LoadFrom(env(nil), "K"); !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "K_FILE") {
		t.Errorf("missing: %v", err)
	}
	if _, err := LoadFrom(env(map[string]string{"K_FILE": empty}), "K"); !errors.Is(err, ErrMissing) {
		t.Errorf("empty file: %v", err)
	}
	if _, err := LoadFrom(env(map[string]string{"K_FILE": filepath.Join(dir, "nope")}), "K"); err == nil || !strings.Contains(err.Error(), "K_FILE") {
		t.Errorf("unreadable file: %v", err)
	}
}
