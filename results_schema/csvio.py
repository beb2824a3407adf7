"""CSV files of schema rows: columns are the model's fields in order; None is an empty cell."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Type, TypeVar

from pydantic import BaseModel, ValidationError

Row = TypeVar("Row", bound=BaseModel)


class CsvSchemaError(ValueError):
    """A CSV file that does not match its model: which file, which line, what is wrong."""


def columns(model: Type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def write_rows(path: Path, model: Type[Row], rows: Iterable[Row]) -> int:
    count = 0
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns(model))
        writer.writeheader()
        for row in rows:
            data = row.model_dump(mode="json")
            writer.writerow({k: "" if v is None else v for k, v in data.items()})
            count += 1
    return count


def read_rows(path: Path, model: Type[Row]) -> list[Row]:
    """Every row validated; the first bad one raises CsvSchemaError naming its line."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != columns(model):
            raise CsvSchemaError(
                f"{path.name}: header {reader.fieldnames} does not match {model.__name__} "
                f"columns {columns(model)}"
            )
        rows = []
        for line, raw in enumerate(reader, start=2):
            if None in raw or any(v is None for v in raw.values()):
                raise CsvSchemaError(f"{path.name} line {line}: wrong number of cells")
            # An empty cell means "the default" (None for optional fields, "" for text).
            cleaned = {
                k: v for k, v in raw.items() if v != "" or model.model_fields[k].is_required()
            }
            try:
                rows.append(model.model_validate(cleaned))
            except ValidationError as e:
                first = e.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise CsvSchemaError(
                    f"{path.name} line {line}: {field}: {first['msg']} (got {raw.get(field)!r})"
                ) from None
    return rows
