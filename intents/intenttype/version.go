package intenttype

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is an intent as an operator saw it, for guarding an action
// (DESIGN.md, invariant 11): its key generation and attempt count. Every
// change an operator could act on moves one of them: a resend or a proven
// absence starts a new key generation, and every call claims an attempt.
// An intent that went in_doubt, was resent, was charged and went in_doubt
// again is in the same state but not at the same version.
type Version struct {
	KeyGeneration int
	AttemptCount  int
}

// Version returns the intent's version.
func (in Intent) Version() Version {
	return Version{KeyGeneration: in.KeyGeneration, AttemptCount: in.AttemptCount}
}

// String writes v as "g<key generation>.a<attempt count>" ("g0.a2"), the
// form ParseVersion reads, the CLI's --if-version takes, and the API's
// if_version and JSON carry.
func (v Version) String() string { return fmt.Sprintf("g%d.a%d", v.KeyGeneration, v.AttemptCount) }

// ParseVersion reads a Version written by Version.String.
func ParseVersion(s string) (Version, error) {
	g, a, ok := strings.Cut(strings.TrimSpace(s), ".")
	if !ok || !strings.HasPrefix(g, "g") || !strings.HasPrefix(a, "a") {
		return Version{}, fmt.Errorf("version %q is not of the form g<key generation>.a<attempt count>, as intents show it (g0.a2)", s)
	}
	gen, err1 := strconv.Atoi(g[1:])
	att, err2 := strconv.Atoi(a[1:])
	if err1 != nil || err2 != nil || gen < 0 || att < 0 {
		return Version{}, fmt.Errorf("version %q is not of the form g<key generation>.a<attempt count>, as intents show it (g0.a2)", s)
	}
	return Version{KeyGeneration: gen, AttemptCount: att}, nil
}

// MarshalText writes v as String does, so that JSON carries "g0.a2".
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText reads v as ParseVersion does.
func (v *Version) UnmarshalText(b []byte) error {
	parsed, err := ParseVersion(string(b))
	if err != nil {
		return err
	}
	*v = parsed
	return nil
}
