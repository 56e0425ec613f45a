// Validates the spec given as FIELD=VALUE arguments with the installed library
// and prints its canonical name; a SpecError prints its message and exits 2.

#include <xqajit/error.hpp>
#include <xqajit/spec.hpp>

#include <iostream>
#include <map>
#include <string>

int main(int argc, char** argv) {
  std::map<std::string, std::string> fields;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos) {
      std::cerr << "usage: app FIELD=VALUE...\n";
      return 2;
    }
    fields[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  try {
    const xqajit::KernelSpec spec = xqajit::spec_from_fields(fields);
    std::cout << xqajit::canonical_name(spec) << "\n";
    return 0;
  } catch (const xqajit::SpecError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
