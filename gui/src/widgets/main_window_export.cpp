// The main window's exports: the timeline as shown (PNG, or SVG where Qt Svg is available)
// and the rank table as CSV, written atomically, from a program or a save dialog.
#include <QBuffer>
#include <QFileDialog>
#include <QImage>
#include <QMessageBox>
#include <QPainter>
#include <QPixmap>

#ifdef PIPESCOPE_HAVE_QT_SVG
#include <QSvgGenerator>
#endif

#include <string_view>

#include "main_window.hpp"
#include "pipescope/core/atomic_file.hpp"
#include "rank_summary_table.hpp"
#include "timeline_widget.hpp"

namespace pipescope::gui {

bool MainWindow::can_export_svg() {
#ifdef PIPESCOPE_HAVE_QT_SVG
  return true;
#else
  return false;
#endif
}

std::optional<QString> MainWindow::export_view(const QString& path) const {
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  if (path.endsWith(".svg", Qt::CaseInsensitive)) {
#ifdef PIPESCOPE_HAVE_QT_SVG
    QSvgGenerator svg;
    svg.setOutputDevice(&buffer);
    svg.setSize(timeline_->size());
    svg.setViewBox(QRect(QPoint(0, 0), timeline_->size()));
    svg.setTitle(windowTitle());
    svg.setDescription("ppview timeline");
    QPainter painter(&svg);
    timeline_->render(&painter);
    painter.end();
#else
    return QString("%1: this ppview was built without Qt Svg; export as .png instead").arg(path);
#endif
  } else {
    const QImage image = timeline_->grab().toImage();
    if (image.isNull() || !image.save(&buffer, "PNG")) return QString("%1: cannot encode the view as PNG").arg(path);
  }
  try {
    write_file_atomic(path.toStdString(), std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())));
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  return std::nullopt;
}

std::optional<QString> MainWindow::export_rank_table(const QString& path) const {
  try {
    write_file_atomic(path.toStdString(), ranks_->csv());
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  return std::nullopt;
}

void MainWindow::export_view_with_dialog(const QString& format) {
  const QString filter = format == "svg" ? "SVG images (*.svg)" : "PNG images (*.png)";
  QString path = QFileDialog::getSaveFileName(this, "Export the view", "timeline." + format, filter);
  if (path.isEmpty()) return;
  if (!path.endsWith("." + format, Qt::CaseInsensitive)) path += "." + format;
  if (auto error = export_view(path)) QMessageBox::critical(this, "ppview: cannot export", *error);
}

void MainWindow::export_rank_table_with_dialog() {
  QString path = QFileDialog::getSaveFileName(this, "Export the rank table", "ranks.csv", "CSV files (*.csv)");
  if (path.isEmpty()) return;
  if (!path.endsWith(".csv", Qt::CaseInsensitive)) path += ".csv";
  if (auto error = export_rank_table(path)) QMessageBox::critical(this, "ppview: cannot export", *error);
}

}  // namespace pipescope::gui
