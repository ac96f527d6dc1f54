package cli

import (
	"fmt"
	"strings"
)

// StopOnSignal is stopOnSignal, for the test that sends it real signals.
var StopOnSignal = stopOnSignal

// CutValues is what scanJSONValues cuts in into: each value's text, or
// its error, with the line it starts on.
func CutValues(in string, maxValue int) []string {
	var out []string
	scanJSONValues(strings.NewReader(in), maxValue, func(v jsonValue) bool {
		switch {
		case v.fatal != nil:
			out = append(out, fmt.Sprintf("fatal: %v", v.fatal))
		case v.bad != nil:
			out = append(out, fmt.Sprintf("%d bad: %v", v.line, v.bad))
		default:
			out = append(out, fmt.Sprintf("%d %s", v.line, v.data))
		}
		return true
	})
	return out
}
