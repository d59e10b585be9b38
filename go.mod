module github.com/lmlite/lmlite

go 1.26.8

require github.com/x448/float16 v0.8.4

require github.com/dlclark/regexp2 v1.12.0
