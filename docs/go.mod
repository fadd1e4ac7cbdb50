module github.com/addrlimit/addrlimit/docs

go 1.26.0
