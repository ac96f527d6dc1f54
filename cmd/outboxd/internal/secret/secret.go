// Package secret reads credentials from the environment or from a file,
// never from flags (which leak into ps and shell history).
package secret

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrMissing is wrapped by Load's error when neither NAME nor NAME_FILE is
// set.
var ErrMissing = errors.New("credential not set")

// Load returns the value of the environment variable name, or, when it is
// empty, the trimmed contents of the file named by name+"_FILE" (the Docker
// and Kubernetes secrets convention). Errors name the variable, never the
// value.
func Load(name string) (string, error) {
	return LoadFrom(os.Getenv, name)
}

// LoadFrom is Load with an injectable environment, for tests.
func LoadFrom(getenv func(string) string, name string) (string, error) {
	if v := getenv(name); v != "" {
		return v, nil
	}
	path := getenv(name + "_FILE")
	if path == "" {
		return "", fmt.Errorf("%w: set %s, or %s_FILE to a file that holds it", ErrMissing, name, name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s_FILE: %w", name, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%w: %s_FILE (%s) is empty", ErrMissing, name, path)
	}
	return v, nil
}
