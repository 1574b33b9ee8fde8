// Package cputime reads the CPU time a process has used, for the bench's
// CPU columns.
package cputime
