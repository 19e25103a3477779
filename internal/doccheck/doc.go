// Package doccheck holds the documentation to the repository: its tests fail when a
// relative link in README.md or docs/*.md points at a missing file or heading, when the
// README's lockcore example does not compile, when a make target is missing from
// docs/layout.md, when docs/performance.md states other bench targets than internal/bench
// checks, or when development history creeps into the user documentation.
package doccheck
