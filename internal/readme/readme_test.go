package readme_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, relative to this package.
const root = "../.."

// documents are the Markdown files whose Go blocks and make targets are
// checked.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, docs...)
}

var exampleMarker = regexp.MustCompile(`^<!-- example: (\S+)#(\S+) -->$`)

// goBlock is a ```go block of a document and the example it names.
type goBlock struct {
	line         int // of the opening fence
	code         string
	path, region string // empty when the block has no marker
}

func goBlocks(t *testing.T, doc string) []goBlock {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []goBlock
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := goBlock{line: i + 1}
		for j := i - 1; j >= 0; j-- {
			if s := strings.TrimSpace(lines[j]); s != "" {
				if m := exampleMarker.FindStringSubmatch(s); m != nil {
					b.path, b.region = m[1], m[2]
				}
				break
			}
		}
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, lines[i])
		}
		b.code = strings.Join(code, "\n")
		blocks = append(blocks, b)
	}
	return blocks
}

// region returns the lines between "// readme:NAME begin" and
// "// readme:NAME end" in the file at path, without their common
// indentation.
func region(path, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return "", err
	}
	begin, end := "// readme:"+name+" begin", "// readme:"+name+" end"
	var out []string
	inside, found := false, false
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		l := sc.Text()
		switch strings.TrimSpace(l) {
		case begin:
			inside, found = true, true
			continue
		case end:
			inside = false
		}
		if inside {
			out = append(out, l)
		}
	}
	if !found {
		return "", fmt.Errorf("%s has no region %q (a line %q)", path, name, begin)
	}
	indent := -1
	for _, l := range out {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range out {
		if len(l) >= indent && indent > 0 {
			out[i] = l[indent:]
		}
	}
	return strings.Join(out, "\n"), nil
}

// TestGoBlocksAreCopiesOfExamples fails when a Go block of the README or
// docs/ is not, to the byte, a region of an example that compiles (and
// runs, where it needs no broker): fix the example, then copy the region.
func TestGoBlocksAreCopiesOfExamples(t *testing.T) {
	t.Parallel()
	total := 0
	for _, doc := range documents(t) {
		name, _ := filepath.Rel(root, doc)
		for _, b := range goBlocks(t, doc) {
			total++
			if b.path == "" {
				t.Errorf("%s:%d: a Go block without <!-- example: PATH#REGION --> above it; put the code in an example (internal/readme/example_test.go) and copy it", name, b.line)
				continue
			}
			if !strings.HasSuffix(b.path, "_test.go") || !strings.Contains(filepath.Base(b.path), "example") {
				t.Errorf("%s:%d: %s is not an example test file", name, b.line, b.path)
				continue
			}
			want, err := region(b.path, b.region)
			if err != nil {
				t.Errorf("%s:%d: %v", name, b.line, err)
				continue
			}
			if b.code != want {
				t.Errorf("%s:%d: the Go block differs from %s#%s; copy the region:\n%s\n--- the block has:\n%s", name, b.line, b.path, b.region, want, b.code)
			}
		}
	}
	if total == 0 {
		t.Error("no Go block found in the README: is the test reading the right files?")
	}
}

// TestMakeTargetsExist fails when a document names `make X` and the
// Makefile has no target X.
func TestMakeTargetsExist(t *testing.T) {
	t.Parallel()
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9/_.-]+):`).FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	named := regexp.MustCompile("`make( [a-z][a-zA-Z0-9/_-]*)?[` ]|^make( [a-z][a-zA-Z0-9/_-]*)?( |$)")
	for _, doc := range documents(t) {
		name, _ := filepath.Rel(root, doc)
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(data), "\n") {
			for _, m := range named.FindAllStringSubmatch(strings.TrimSpace(l), -1) {
				target := strings.TrimSpace(m[1] + m[2])
				if target != "" && !targets[target] {
					t.Errorf("%s:%d names `make %s`; the Makefile has no such target", name, i+1, target)
				}
			}
		}
	}
}

// TestMakeDemoSaysItIsBuilding: make demo builds bin/outboxd first, saying
// so before the compiler's silent minute, and then runs it (go run printed
// nothing while it compiled).
func TestMakeDemoSaysItIsBuilding(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("make", "-n", "demo")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("make -n demo: %v\n%s", err, out)
	}
	plan := string(out)
	say, build, run := strings.Index(plan, "echo \"building bin/outboxd"), strings.Index(plan, " build "), strings.Index(plan, "bin/outboxd demo")
	if say < 0 || build < say || run < build || strings.Contains(plan, "go run") {
		t.Errorf("make demo should say it is building bin/outboxd, build it, then run bin/outboxd demo; it runs:\n%s", plan)
	}
}

// TestInstallPinsWhatTheREADMEDocuments: the README documents the code
// beside it, so its install lines pin that: main while CHANGELOG.md lists
// unreleased changes (the latest release lacks them), the latest release
// once it holds everything.
func TestInstallPinsWhatTheREADMEDocuments(t *testing.T) {
	t.Parallel()
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	releases := regexp.MustCompile(`(?m)^## \[([^\]]+)\]`).FindAllStringSubmatchIndex(string(changelog), -1)
	if len(releases) < 2 || string(changelog[releases[0][2]:releases[0][3]]) != "Unreleased" {
		t.Fatal("CHANGELOG.md does not start with [Unreleased] and a release")
	}
	unreleased := string(changelog[releases[0][1]:releases[1][0]])
	want := "v" + string(changelog[releases[1][2]:releases[1][3]])
	if regexp.MustCompile(`(?m)^- `).MatchString(unreleased) {
		want = "main"
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	pins := regexp.MustCompile(`go (?:get|install) github\.com/outboxkit/outbox(?:/cmd/outboxd)?@(\S+)`).FindAllStringSubmatch(string(readme), -1)
	if len(pins) < 2 {
		t.Fatalf("the README has %d install lines (go get, go install), want both", len(pins))
	}
	for _, p := range pins {
		if p[1] != want {
			t.Errorf("the README installs %q; it documents %s, so it must pin @%s", p[0], map[bool]string{true: "unreleased changes (CHANGELOG.md)", false: "the latest release"}[want == "main"], want)
		}
	}
}

// TestMakeHelpPrintsNoVariableLiterally: make's list of targets says what
// each does in words a reader can use, never a $(VARIABLE) of the Makefile.
func TestMakeHelpPrintsNoVariableLiterally(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("make", "--no-print-directory", "help")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("make help: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "$(") || !strings.Contains(string(out), "make demo") {
		t.Errorf("make help:\n%s", out)
	}
}
