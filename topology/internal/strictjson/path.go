package strictjson

import "fmt"

// Field returns the path of the member key of the object at path:
// "sites[2].leafnode", or `events["a b"]` when key is not plain (see
// isPlainKey); just key at the top level.
func Field(path, key string) string {
	if !isPlainKey(key) {
		key = fmt.Sprintf("[%q]", key)
		return path + key
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// Elem returns the path of element i of the array at path: "sites[2]".
func Elem(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}

// isPlainKey reports whether key can appear unquoted in a path: it is not
// empty and holds only ASCII letters, digits, '_' and '-'.
func isPlainKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
