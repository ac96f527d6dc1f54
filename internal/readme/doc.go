// Package readme holds no code: its tests keep the documentation honest.
// Every Go block in README.md and docs/*.md is a region of an example in
// this package (which compiles, and runs where it needs no broker), marked
// in the Markdown by the comment <!-- example: PATH#REGION --> above the
// block; and every `make X` the documents name is a Makefile target.
package readme
