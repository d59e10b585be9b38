//go:build !unix

package main

// alive cannot tell without kill(2): every note counts as a running server.
func alive(pid int) bool { return true }
