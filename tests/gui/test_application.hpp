// The one QApplication of the gui test executable, shared by its test files: offscreen, with
// a throw-away settings folder (XDG_CONFIG_HOME) and a test-only organization name, so recent
// files written by the tests never touch a user's ppview settings.
#pragma once

#include <QApplication>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace pipescope::gui::testing {

inline constexpr const char* kTestOrganization = "pipescope-test";

// The settings folder of this test run (holds kTestOrganization/ppview.conf).
inline std::filesystem::path settings_dir() {
  return std::filesystem::temp_directory_path() / ("pipescope_test_gui_settings_" + std::to_string(::getpid()));
}

inline QApplication& app() {
  static int argc = 1;
  static char name[] = "test_gui";
  static char* argv[] = {name, nullptr};
  static QApplication* instance = [] {
    setenv("QT_QPA_PLATFORM", "offscreen", 0);
    setenv("XDG_CONFIG_HOME", settings_dir().c_str(), 1);
    auto* application = new QApplication(argc, argv);
    QApplication::setOrganizationName(kTestOrganization);
    return application;
  }();
  return *instance;
}

}  // namespace pipescope::gui::testing
