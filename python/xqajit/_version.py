__version__ = "0.1.0"  # the library's version: CMakeLists.txt project(xqajit VERSION ...)
