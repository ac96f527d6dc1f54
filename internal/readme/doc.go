// Package readme holds no code: its tests keep the documentation honest.
//
//   - Every Go block in README.md and docs/*.md is a region of an example
//     (which compiles, and runs where it needs no broker), marked in the
//     Markdown by the comment <!-- example: PATH#REGION --> above the
//     block.
//   - The README's Go blocks, in order, build and run as one program
//     against an empty database and the doubles, and perform its intents.
//   - The README's transcripts (blocks whose first line starts with "$ ")
//     are run in a fresh clone of the repository, from make build to an
//     audited intent, and must print what they show.
//   - Every `make X` the documents name is a Makefile target; make demo
//     says it is building before it compiles; the install lines pin what
//     the README documents.
package readme
