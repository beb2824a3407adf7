"""CSV files of schema rows: columns are the model's fields in order; None is an empty cell."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, TypeVar

from pydantic import BaseModel, ValidationError

Row = TypeVar("Row", bound=BaseModel)


class CsvSchemaError(ValueError):
    """A CSV file that does not match its model: which file, which line, what is wrong."""


def columns(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def cell(value: object) -> str:
    """None is empty; booleans are true/false; datetimes ISO 8601 with their offset."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


class CsvWriter:
    """Appends rows of one model, flushing after each batch so a preempted run keeps them."""

    def __init__(self, path: Path, model: type[BaseModel]) -> None:
        self.path = path
        self.model = model
        self.rows = 0
        self._file: IO[str] = self._open(path)
        self._writer = csv.writer(self._file)
        self._writer.writerow(columns(model))

    def _open(self, path: Path) -> IO[str]:
        """The file rows go to (a subclass may watch what is written through it)."""
        return open(path, "w", newline="", encoding="utf-8")

    def write(self, rows: Iterable[BaseModel]) -> None:
        fields = columns(self.model)
        for row in rows:
            if not isinstance(row, self.model):
                raise TypeError(f"{self.path.name} holds {self.model.__name__} rows, got {row!r}")
            self._writer.writerow([cell(getattr(row, f)) for f in fields])
            self.rows += 1
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CsvWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_csv(path: Path, model: type[BaseModel], rows: Iterable[BaseModel]) -> int:
    with CsvWriter(path, model) as writer:
        writer.write(rows)
        return writer.rows


def read_rows(path: Path, model: type[Row]) -> list[Row]:
    """Every row validated; the first bad one raises CsvSchemaError naming its line."""
    return list(iter_rows(path, model))


def iter_rows(path: Path, model: type[Row]) -> Iterator[Row]:
    """Rows one at a time, so a caller that only counts or checks them holds one in memory."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            yield from _validated(path, csv.DictReader(f), model)
    except (csv.Error, UnicodeDecodeError) as e:
        raise CsvSchemaError(f"{path.name}: not a UTF-8 CSV file ({e})") from None


def _validated(path: Path, reader: csv.DictReader, model: type[Row]) -> Iterator[Row]:
    if reader.fieldnames != columns(model):
        raise CsvSchemaError(
            f"{path.name}: header {reader.fieldnames} does not match {model.__name__} "
            f"columns {columns(model)}"
        )
    for line, raw in enumerate(reader, start=2):
        if None in raw or any(v is None for v in raw.values()):
            raise CsvSchemaError(f"{path.name} line {line}: wrong number of cells")
        # An empty cell means "the default" (None for optional fields, "" for text).
        cleaned = {k: v for k, v in raw.items() if v != "" or model.model_fields[k].is_required()}
        try:
            yield model.model_validate(cleaned)
        except ValidationError as e:
            first = e.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise CsvSchemaError(
                f"{path.name} line {line}: {field}: {first['msg']} (got {raw.get(field)!r})"
            ) from None
