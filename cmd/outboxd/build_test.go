package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestTheImageIsStampedWithItsVersionAsMakeBuildIs: the Dockerfile's build
// sets the same version variable make build sets, from a VERSION build
// argument that make docker and the compose file pass (the build context
// has no .git to ask), so the image's 'outboxd version' is not "dev".
func TestTheImageIsStampedWithItsVersionAsMakeBuildIs(t *testing.T) {
	t.Parallel()
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile("../../" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	makefile, dockerfile, compose := read("Makefile"), read("Dockerfile"), read("docker-compose.yml")

	m := regexp.MustCompile(`(?m)^LDFLAGS\s*:=\s*-X (\S+)=\$\(VERSION\)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no LDFLAGS := -X <variable>=$(VERSION)")
	}
	variable := m[1]
	build := dockerfile[strings.Index(dockerfile, "AS build"):]
	build = build[:strings.Index(build+"\nFROM ", "\nFROM ")]
	if !regexp.MustCompile(`(?m)^ARG VERSION(=\S+)?$`).MatchString(build) {
		t.Errorf("the Dockerfile's build stage declares no ARG VERSION:\n%s", build)
	}
	goBuild := regexp.MustCompile(`go build [^\n]*`).FindString(build)
	if !strings.Contains(goBuild, "-X "+variable+"=${VERSION}") {
		t.Errorf("the Dockerfile builds with %q; want -ldflags with -X %s=${VERSION}, as make build sets it", goBuild, variable)
	}
	if !regexp.MustCompile(`(?m)^\tdocker build --build-arg VERSION=\$\(VERSION\) `).MatchString(makefile) {
		t.Error("make docker does not pass --build-arg VERSION=$(VERSION)")
	}
	if !regexp.MustCompile(`(?m)^\s+VERSION: \$\{OUTBOXD_VERSION:-dev\}$`).MatchString(compose) {
		t.Error("docker-compose.yml's build does not pass VERSION from OUTBOXD_VERSION")
	}
}
