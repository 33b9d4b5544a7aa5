package tree

import (
	"strings"
	"unicode/utf8"
)

// validPath reports whether p is a path ZooKeeper accepts
// (PathUtils.validatePath): it starts with "/", does not end with "/"
// unless it is the root, and has no empty, "." or ".." names, no NUL, no
// control characters, and none of the characters ZooKeeper's Java strings
// reject: U+007F–U+009F, U+D800–U+F8FF, U+FFF0–U+FFFF and everything
// beyond U+FFFF (which Java holds as surrogates). Invalid UTF-8 decodes to
// U+FFFD in Java, so it is rejected too.
func validPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	if p == "/" {
		return true
	}
	if p[len(p)-1] == '/' {
		return false
	}
	for _, name := range strings.Split(p[1:], "/") {
		if name == "" || name == "." || name == ".." {
			return false
		}
	}
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			return false
		case r < 0x20, r >= 0x7f && r <= 0x9f, r >= 0xd800 && r <= 0xf8ff, r >= 0xfff0:
			return false
		}
	}
	return true
}

// parentOf returns the parent of a valid path other than the root, and
// the child's name in it.
func parentOf(p string) (parent, name string) {
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// childPath joins a parent path and a child's name.
func childPath(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// Paths ZooKeeper reserves: the root and the "/zookeeper" subtree it
// creates itself. None of them can be deleted.
const (
	procPath   = "/zookeeper"
	quotaPath  = "/zookeeper/quota"
	configPath = "/zookeeper/config"
)

func specialPath(p string) bool {
	return p == "/" || p == procPath || p == quotaPath || p == configPath
}
