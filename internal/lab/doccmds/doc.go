// Package doccmds holds a test that runs the commands of the README's quick
// start and of docs/DEPLOYING.md as written, in a scratch clone of the
// checkout, the way a newcomer would: what the docs tell a user to type has to
// work, not only what the tests call.
package doccmds
