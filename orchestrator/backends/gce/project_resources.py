"""Reads of what a project offers: its quotas, regions, zones, machine and accelerator types
and image families. The only calls `bench doctor` and launch's cheap checks make to Compute.

Each read returns the resource as a plain dict (the REST JSON), or None when the API says
404; any other failure leaves as a bench error with the google.api_core exception as its
`__cause__` (doctor tells 401 from 403 from 404 by it).
"""

from __future__ import annotations

from typing import Any

from orchestrator.backends.gce.compute import HTTP_TIMEOUT_SECONDS, ComputeApi, _is_not_found
from orchestrator.errors import BenchError


class ProjectResources:
    def __init__(self, api: ComputeApi) -> None:
        self.api = api
        self.project = api.project
        self._clients: dict[str, Any] = {}  # compute_v1 client class name -> client

    def _client(self, name: str):
        from google.cloud import compute_v1

        return self.api._make(getattr(compute_v1, name))

    def _get(self, client_name: str, **request: Any) -> dict[str, Any] | None:
        from google.protobuf import json_format

        if client_name not in self._clients:
            self._clients[client_name] = self._client(client_name)
        client = self._clients[client_name]
        method = client.get_from_family if "family" in request else client.get
        try:
            resource = self.api._call(
                lambda: method(
                    request=request, retry=self.api._read_retry, timeout=HTTP_TIMEOUT_SECONDS
                )
            )
        except BenchError as e:
            if _is_not_found(e):
                return None
            raise
        return json_format.MessageToDict(type(resource).pb(resource))

    def project_info(self) -> dict[str, Any] | None:
        return self._get("ProjectsClient", project=self.project)

    def region(self, region: str) -> dict[str, Any] | None:
        return self._get("RegionsClient", project=self.project, region=region)

    def zone(self, zone: str) -> dict[str, Any] | None:
        return self._get("ZonesClient", project=self.project, zone=zone)

    def machine_type(self, zone: str, name: str) -> dict[str, Any] | None:
        return self._get("MachineTypesClient", project=self.project, zone=zone, machine_type=name)

    def accelerator_type(self, zone: str, name: str) -> dict[str, Any] | None:
        return self._get(
            "AcceleratorTypesClient", project=self.project, zone=zone, accelerator_type=name
        )

    def image_from_family(self, image_project: str, family: str) -> dict[str, Any] | None:
        """The newest image of the family that is not deprecated, or None."""
        return self._get("ImagesClient", project=image_project, family=family)

    def images_in_family(self, image_project: str, family: str) -> list[dict[str, Any]]:
        """Every image of the family, deprecated ones included (to name a successor)."""
        from google.cloud import compute_v1
        from google.protobuf import json_format

        if "ImagesClient" not in self._clients:
            self._clients["ImagesClient"] = self._client("ImagesClient")
        request = compute_v1.ListImagesRequest(project=image_project, filter=f'family = "{family}"')
        pages = self.api._call(
            lambda: list(
                self._clients["ImagesClient"].list(
                    request=request, retry=self.api._read_retry, timeout=HTTP_TIMEOUT_SECONDS
                )
            )
        )
        return [json_format.MessageToDict(type(i).pb(i)) for i in pages]

    def image_state(self, image_project: str, family: str) -> tuple[dict | None, list[dict]]:
        """What readiness.image_check judges: the family's usable image, and (only when
        there is none, or it is deprecated) every image of the family."""
        resolved = self.image_from_family(image_project, family)
        if resolved is not None and not resolved.get("deprecated"):
            return resolved, []
        return resolved, self.images_in_family(image_project, family)
